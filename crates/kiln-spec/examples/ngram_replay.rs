//! Replays n-gram drafting over a finished greedy generation, pass by pass, without the
//! model: under greedy decoding a drafted token is accepted exactly when it equals the
//! token the target produced next, so the generation's tokens decide every verification
//! and the replay draws the same drafts, acceptances and passes as the real run (given the
//! same pass-cost curve).
//!
//! `kiln generate --json --temperature 0 [--spec ngram] … > run.json`, then
//! `cargo run --release -p kiln-spec --example ngram_replay -- run.json [MODEL] [DRAFT_MAX] [CURVE]`
//!
//! The JSON gives the prompt's and the output's token ids and, from a speculative run, the
//! measured pass-cost curve (`timings.speculative.pass_cost`; without it every pass costs
//! one step). `CURVE` (`1:1,2:1.2,4:1.4,8:1.7,17:2.2`: decode steps by pass size)
//! replaces it, to compare drafters under the same costs. With `MODEL` (a path or known name) the prompt tokens are printed as text too.
//! Per pass it prints the output position, the match the draft came from (its length, its
//! end's position in the text, how many earlier places end with the same suffix and how
//! many different next tokens they have), the draft, how much of it was accepted and what
//! the output actually continued with; each rejection is classified:
//!
//! - `departs`: the token the output continued with never follows the text's last token
//!   anywhere earlier — no lookup could have drafted it (the rename, new framing);
//! - `other-match`: another earlier place ending with the same suffix was followed by what
//!   the output did (several matches, the wrong one chosen);
//! - `short-match`: a match of one or two tokens, rejected at once (a chance match);
//! - `span-ended`: part of the draft was accepted, then the copied passage and the output
//!   went different ways (a draft longer than the span that matched);
//! - `other`: none of these.
//!
//! It ends with the totals and what the passes cost by the curve.

use std::sync::Arc;

use kiln_spec::{DraftLength, NgramDrafter, PassCost};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: ngram_replay RUN.json [MODEL] [DRAFT_MAX] [CURVE]");
        std::process::exit(2);
    };
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("reads the run's JSON"))
            .expect("parses the run's JSON");
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_u64())
                    .map(|x| x as u32)
                    .collect()
            })
            .unwrap_or_default()
    };
    let prompt = ids(&json["prompt_tokens"]);
    let empty = Vec::new();
    let toks = json["tokens"].as_array().unwrap_or(&empty);
    let output: Vec<u32> = toks
        .iter()
        .filter_map(|t| t["id"].as_u64())
        .map(|x| x as u32)
        .collect();
    let mut text: std::collections::HashMap<u32, String> = toks
        .iter()
        .filter_map(|t| Some((t["id"].as_u64()? as u32, t["text"].as_str()?.to_string())))
        .collect();
    if let Some(model) = args.get(2) {
        let model = kiln_model::Model::open(kiln_testkit::model_path(model)).expect("model");
        let tk = kiln_tokenizer::Tokenizer::from_gguf(model.gguf().expect("GGUF").metadata())
            .expect("tokenizer");
        for &id in &prompt {
            text.entry(id)
                .or_insert_with(|| String::from_utf8_lossy(tk.token_bytes(id)).into_owned());
        }
    }
    let draft_max: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(16);
    let curve: Vec<(usize, f64)> = json["timings"]["speculative"]["pass_cost"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| Some((p[0].as_u64()? as usize, p[1].as_f64()?)))
                .collect()
        })
        .unwrap_or_default();
    // A curve given as `n:steps,n:steps,…` replaces the run's.
    let curve: Vec<(usize, f64)> = match args.get(4) {
        Some(c) => c
            .split(',')
            .filter_map(|p| {
                let (n, s) = p.split_once(':')?;
                Some((n.trim().parse().ok()?, s.trim().parse().ok()?))
            })
            .collect(),
        None => curve,
    };
    let show = |t: &[u32]| -> String {
        let s: String = t
            .iter()
            .map(|id| text.get(id).cloned().unwrap_or_else(|| format!("<{id}>")))
            .collect();
        format!("{:?}", s.replace('Ġ', " ").replace('Ċ', "\n"))
    };

    let mut drafter = NgramDrafter::new(1, 16);
    let mut length = DraftLength::new(draft_max, true);
    if let Some(c) = PassCost::from_timings(&curve) {
        println!("pass-cost curve: {:?}", c.points());
        length.set_cost(Arc::new(c));
    }
    let Some(&first) = output.first() else {
        eprintln!("the run generated nothing");
        return;
    };
    let mut history = prompt.clone();
    history.push(first);
    let mut generated = 1;
    let (mut passes, mut drafted, mut accepted_total, mut draft_steps) = (1u64, 0u64, 0u64, 0u64);
    let mut steps = 0.0f64;
    let mut classes = std::collections::BTreeMap::<&str, (u32, u32)>::new();
    let mut draft = Vec::new();
    while generated < output.len() {
        let limit = output.len() - generated;
        let k = length.take().min(limit.saturating_sub(1));
        let k = length.worth_scoring(k);
        draft.clear();
        let m = if k > 0 {
            drafter.draft(&history, k, &mut draft)
        } else {
            0
        };
        let keep = length.worth_scoring(draft.len());
        draft.truncate(keep);
        let actual = &output[generated..];
        let n = draft.len();
        let accepted = draft.iter().zip(actual).take_while(|(d, a)| d == a).count();
        let emit = (accepted + 1).min(actual.len());
        if n > 0 {
            let (cands, conts) = candidates(&history, m);
            let class = (accepted < n).then(|| classify(&history, m, accepted, &draft, actual));
            println!(
                "@{generated:3} m={m:2} cands={cands:2} conts={conts:2} k={k:2} acc={accepted:2}/{n:2} {} draft={} actual={}",
                class.unwrap_or("accepted"),
                show(&draft),
                show(&actual[..(n + 1).min(actual.len())]),
            );
            if let Some(c) = class {
                let e = classes.entry(c).or_default();
                e.0 += 1;
                e.1 += (n - accepted) as u32;
            }
            draft_steps += 1;
        } else {
            println!("@{generated:3} plain (k={k}) {}", show(&actual[..1]));
        }
        drafted += n as u64;
        accepted_total += accepted as u64;
        steps += length.cost().map_or(1.0, |c| c.of(n + 1));
        length.update(n, accepted);
        history.extend_from_slice(&actual[..emit]);
        generated += emit;
        passes += 1;
    }
    println!(
        "drafted {drafted}, accepted {accepted_total} ({:.1}%), mean accepted length {:.2}, \
         {passes} target passes for {} tokens, {steps:.1} steps by the curve \
         (speed-up by pass count {:.2}×)",
        100.0 * accepted_total as f64 / drafted.max(1) as f64,
        1.0 + accepted_total as f64 / draft_steps.max(1) as f64,
        output.len(),
        (output.len() - 1) as f64 / steps.max(1e-9),
    );
    for (c, (passes, lost)) in classes {
        println!("rejections {c}: {passes} passes, {lost} drafted tokens rejected");
    }
}

/// How many earlier places end with the text's last `m` tokens (and have a next token),
/// and how many different next tokens they have.
fn candidates(h: &[u32], m: usize) -> (usize, usize) {
    if m == 0 {
        return (0, 0);
    }
    let suffix = &h[h.len() - m..];
    let mut next: Vec<u32> = (m..h.len())
        .filter(|&e| &h[e - m..e] == suffix)
        .map(|e| h[e])
        .collect();
    let cands = next.len();
    next.sort_unstable();
    next.dedup();
    (cands, next.len())
}

/// Why a draft (from a match of `m` tokens) was rejected after `accepted` tokens.
fn classify(h: &[u32], m: usize, accepted: usize, draft: &[u32], actual: &[u32]) -> &'static str {
    let mut text = h.to_vec();
    text.extend_from_slice(&draft[..accepted]);
    let want = actual[accepted];
    let last = text[text.len() - 1];
    if !text.windows(2).any(|w| w[0] == last && w[1] == want) {
        return "departs";
    }
    if accepted == 0 {
        let suffix = &h[h.len() - m..];
        if (m..h.len()).any(|e| &h[e - m..e] == suffix && h[e] == want) {
            return "other-match";
        }
        if m <= 2 {
            return "short-match";
        }
        return "other";
    }
    "span-ended"
}
