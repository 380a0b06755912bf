//! The module ladder inside each crate: a test that no crate's top-level modules form a
//! cycle (`a` names `crate::b::…` while `b`, directly or through others, names `crate::a`).
//! Read as text: every `crate::m` path outside comments in a module's files (its tests
//! included) is an edge from that module to `m`.

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    /// `src` of every crate in the workspace, and xtask's own.
    fn source_roots() -> Vec<PathBuf> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut roots: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
            .expect("crates/")
            .map(|e| e.expect("entry").path().join("src"))
            .filter(|p| p.is_dir())
            .collect();
        roots.push(root.join("xtask/src"));
        roots.sort();
        roots
    }

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("readable source dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                rust_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    /// Edges between the top-level modules of the crate whose sources are in `src`.
    fn module_edges(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
        let mut files = Vec::new();
        rust_files(src, &mut files);
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for file in files {
            let rel = file.strip_prefix(src).expect("under src");
            let top = rel.components().next().expect("a component");
            let top = top.as_os_str().to_string_lossy();
            let top = top.trim_end_matches(".rs").to_string();
            if top == "lib" || top == "main" {
                continue;
            }
            let text = std::fs::read_to_string(&file).expect("readable");
            for line in text.lines() {
                let code = line.split("//").next().unwrap_or("");
                let mut rest = code;
                while let Some(i) = rest.find("crate::") {
                    let tail = &rest[i + "crate::".len()..];
                    let name: String = tail
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    let preceded = rest[..i].chars().last();
                    let is_path =
                        !matches!(preceded, Some(c) if c.is_ascii_alphanumeric() || c == '_');
                    if is_path && !name.is_empty() && name != top {
                        edges.entry(top.clone()).or_default().insert(name);
                    }
                    rest = tail;
                }
            }
        }
        edges
    }

    /// A cycle through `start`, if there is one (depth-first search).
    fn cycle_from(edges: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
        let mut stack = vec![(start.to_string(), vec![start.to_string()])];
        let mut seen = BTreeSet::new();
        while let Some((node, path)) = stack.pop() {
            for next in edges.get(&node).into_iter().flatten() {
                if next == start {
                    let mut cycle = path.clone();
                    cycle.push(start.to_string());
                    return Some(cycle);
                }
                if seen.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next.clone(), p));
                }
            }
        }
        None
    }

    #[test]
    fn no_crate_has_a_module_cycle() {
        let roots = source_roots();
        assert!(roots.len() > 10, "found only {roots:?}");
        let mut cycles = Vec::new();
        for src in &roots {
            let edges = module_edges(src);
            for module in edges.keys() {
                if let Some(c) = cycle_from(&edges, module) {
                    cycles.push(format!("{}: {}", src.display(), c.join(" -> ")));
                    break;
                }
            }
        }
        assert!(cycles.is_empty(), "module cycles:\n{}", cycles.join("\n"));
    }

    #[test]
    fn a_cycle_is_found_when_there_is_one() {
        let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        edges.entry("a".into()).or_default().insert("b".into());
        edges.entry("b".into()).or_default().insert("c".into());
        assert_eq!(cycle_from(&edges, "a"), None);
        edges.entry("c".into()).or_default().insert("a".into());
        assert_eq!(
            cycle_from(&edges, "a"),
            Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
        );
    }
}
