//! `docs/architectures.md` against the architecture list: every descriptor has its row with
//! its names, and the refusal messages quoted there are the ones the list produces.

use kiln_model::{ARCHITECTURES, supported_architectures, supported_hf_model_types};

fn architectures_md() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/architectures.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// The rows of the table under `## Supported architectures`, as cells.
fn supported_rows(doc: &str) -> Vec<Vec<String>> {
    let section = doc
        .split("## Supported architectures")
        .nth(1)
        .expect("a 'Supported architectures' section");
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // header and separator
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn the_supported_table_has_one_row_per_architecture_with_its_names() {
    let doc = architectures_md();
    let rows = supported_rows(&doc);
    assert_eq!(
        rows.len(),
        ARCHITECTURES.len(),
        "rows: {:?}",
        rows.iter().map(|r| &r[0]).collect::<Vec<_>>()
    );
    for a in ARCHITECTURES {
        let gguf = format!("`{}`", a.gguf_name);
        let row = rows
            .iter()
            .find(|r| r[0] == gguf)
            .unwrap_or_else(|| panic!("no row for {gguf} in docs/architectures.md"));
        let hf: Vec<String> = a.hf_model_types.iter().map(|t| format!("`{t}`")).collect();
        assert_eq!(row[1], hf.join(", "), "model_types of {gguf}");
    }
}

#[test]
fn the_quoted_refusals_list_what_the_loader_lists() {
    let doc = architectures_md();
    for list in [supported_architectures(), supported_hf_model_types()] {
        let quoted = format!("supported: {}`", list.join(", "));
        assert!(
            doc.contains(&quoted),
            "docs/architectures.md lacks {quoted}"
        );
    }
}
