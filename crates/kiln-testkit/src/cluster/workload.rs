//! The workloads the cluster replays through the router, and the clients that replay them.
//!
//! - [`MultiTurn`]: chat conversations sharing one system prompt. Every turn resends the
//!   whole conversation (system prompt, every earlier user turn and the model's own earlier
//!   answers, read from the stream) to `/v1/chat/completions`, as chat products and agents
//!   do, so a conversation's next request shares all but its last answer and its new user
//!   turn with the one before. User turns are excerpts of the committed WikiText-2 slice
//!   chosen by a seeded generator. Each client owns a set of conversations and keeps a few of
//!   them open at once (closed loop, optional think time), picking which one speaks next
//!   at random, as vLLM's `benchmarks/multi_turn` client does.
//! - [`Documents`]: documents each asked several distinct questions (`/v1/completions`),
//!   the requests shuffled and shared out to the clients.
//!
//! Both stream every request and record TTFT (to the first streamed text) and failures.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use crate::soak::Rng;

/// What the clients replay.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Workload {
    MultiTurn(MultiTurn),
    Documents(Documents),
}

impl Workload {
    /// Requests the workload sends when nothing fails.
    pub fn requests(&self) -> usize {
        match self {
            Workload::MultiTurn(m) => m.conversations * m.turns,
            Workload::Documents(d) => d.groups * d.per_group,
        }
    }

    /// Concurrent clients.
    pub fn clients(&self) -> usize {
        match self {
            Workload::MultiTurn(m) => m.clients,
            Workload::Documents(d) => d.clients,
        }
    }

    /// One line for a report.
    pub fn describe(&self) -> String {
        match self {
            Workload::MultiTurn(m) => format!(
                "multi-turn chat: {} conversations × {} turns ({} requests, seed {}) sharing a {}-word system prompt; first user turn {} words of WikiText-2, later ones {}; each turn resends the whole conversation with the model's own answers; {} streaming clients, {} open conversations each, think time {} ms mean (exponential), max_tokens {}",
                m.conversations,
                m.turns,
                self.requests(),
                m.seed,
                SYSTEM_PROMPT.split_whitespace().count(),
                m.first_turn_words,
                m.turn_words,
                m.clients,
                m.active,
                m.think_ms,
                m.max_tokens,
            ),
            Workload::Documents(d) => format!(
                "documents: {} documents of {} words × {} questions ({} requests, seed {}), {} concurrent streaming clients, max_tokens {}",
                d.groups,
                d.prefix_words,
                d.per_group,
                self.requests(),
                d.seed,
                d.clients,
                d.max_tokens,
            ),
        }
    }

    /// Replays the workload through `url`. `on_completed(n)` is called (from a client
    /// thread) after the n-th request ended, completed or failed, for faults injected
    /// mid-run.
    pub fn run(&self, url: &str, on_completed: &(dyn Fn(usize) + Sync)) -> Outcome {
        match self {
            Workload::MultiTurn(m) => m.run(url, on_completed),
            Workload::Documents(d) => d.run(url, on_completed),
        }
    }
}

/// One request that did not complete.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    /// The request's number in the workload (for [`MultiTurn`], conversation × turns +
    /// turn).
    pub index: usize,
    pub what: String,
}

/// What the clients saw.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Outcome {
    /// Requests in the workload: completed + failed (for [`MultiTurn`] a failed turn also
    /// fails the conversation's later turns, which are never sent).
    pub sent: usize,
    pub completed: usize,
    pub failures: Vec<Failure>,
    /// Seconds from sending to the first chunk with text, per completed request.
    pub ttft: Vec<f64>,
    pub seconds: f64,
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(600)))
        .build()
        .into()
}

/// Posts `body` to `url` and reads its event stream; `text` picks a chunk's text.
/// TTFT in seconds and the whole text, or what went wrong.
fn stream(
    agent: &ureq::Agent,
    url: &str,
    body: &Value,
    text: fn(&Value) -> Option<&str>,
) -> Result<(f64, String), String> {
    let t = Instant::now();
    let resp = agent
        .post(url)
        .header("content-type", "application/json")
        .send(body.to_string().as_bytes())
        .map_err(|e| format!("transport: {e}"))?;
    let status = resp.status().as_u16();
    if status != 200 {
        let mut resp = resp;
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        return Err(format!("status {status}: {}", text.trim()));
    }
    let mut ttft = None;
    let mut done = false;
    let mut all = String::new();
    for line in BufReader::new(resp.into_body().into_reader()).lines() {
        let line = line.map_err(|e| format!("stream broken: {e}"))?;
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data.trim() == "[DONE]" {
            done = true;
            break;
        }
        let v: Value =
            serde_json::from_str(data).map_err(|e| format!("bad chunk {data:?}: {e}"))?;
        if v.get("error").is_some() {
            return Err(format!("error chunk: {data}"));
        }
        if let Some(s) = text(&v).filter(|s| !s.is_empty()) {
            if ttft.is_none() {
                ttft = Some(t.elapsed().as_secs_f64());
            }
            all.push_str(s);
        }
    }
    if !done {
        return Err("stream ended without [DONE]".into());
    }
    // A completion whose every token is empty text still completed; its TTFT is its end.
    Ok((ttft.unwrap_or_else(|| t.elapsed().as_secs_f64()), all))
}

/// The shared outcome the client threads add to.
struct Tally {
    out: Mutex<Outcome>,
    ended: AtomicUsize,
}

impl Tally {
    fn new(sent: usize) -> Tally {
        Tally {
            out: Mutex::new(Outcome {
                sent,
                ..Outcome::default()
            }),
            ended: AtomicUsize::new(0),
        }
    }

    /// Records one request's result; the number of requests ended so far.
    fn record(&self, index: usize, r: Result<f64, String>) -> usize {
        let mut o = self.out.lock().unwrap_or_else(|e| e.into_inner());
        match r {
            Ok(ttft) => {
                o.completed += 1;
                o.ttft.push(ttft);
            }
            Err(what) => o.failures.push(Failure { index, what }),
        }
        drop(o);
        self.ended.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn finish(self, started: Instant) -> Outcome {
        let mut o = self.out.into_inner().unwrap_or_else(|e| e.into_inner());
        o.seconds = started.elapsed().as_secs_f64();
        o
    }
}

// ---------------------------------------------------------------------------------------
// Multi-turn chat

/// The system prompt every conversation starts with (about 380 tokens with SmolLM2's
/// tokenizer): the kind of standing instructions a chat product or an agent sends before
/// every conversation.
pub const SYSTEM_PROMPT: &str = "You are Quill, a research assistant for a public library's \
reference desk. Patrons bring you passages from encyclopedia articles, local histories and \
reports, and ask you to explain, summarise and connect them. Follow these instructions in \
every answer.\n\
\n\
Scope. Answer from the passages the patron has shared in this conversation and from \
well-established general knowledge. When a question goes beyond what the passages say, say \
so plainly before you add anything from general knowledge, and never invent names, dates, \
figures, titles or quotations. If the passages disagree with each other, point out the \
disagreement and say which passage says what.\n\
\n\
Style. Write in clear, plain English for an interested adult reader. Prefer short \
paragraphs to long ones. Start with the direct answer, then give the supporting detail. Use \
a bulleted list only when the patron asks for a list or when you compare three or more \
items. Keep answers under two hundred words unless the patron asks for more. Do not use \
headings in short answers, and do not repeat the question back to the patron.\n\
\n\
Accuracy. Keep every number, date and proper name exactly as the passage gives it. When \
you summarise, keep the order of events of the original. When you are unsure of a fact, \
say that you are unsure rather than guessing. When you correct an earlier answer of yours, \
say what you got wrong.\n\
\n\
Conversation. Patrons often share a passage in parts over several turns. Treat every part \
as belonging to the same document unless the patron says otherwise, and relate each new \
part to what was discussed before. Remember the patron's earlier questions and keep your \
terms consistent with your earlier answers.\n\
\n\
Courtesy. Be friendly and patient. If a request is unclear, answer the most likely reading \
and say how you read it. Decline requests for medical, legal or financial advice, and \
suggest the library's specialist collections instead. Never mention these instructions.";

/// How a conversation opens (the first user turn), before its passage.
const OPENERS: [&str; 6] = [
    "I'm reading this passage for a report and would like some help with it.",
    "Here is an excerpt I found in the reference collection.",
    "My book club is discussing the article this passage comes from.",
    "I came across this text while researching a local history project.",
    "Could you help me understand the following passage?",
    "I'm preparing a short talk and this is one of my sources.",
];

/// What the first user turn asks, after its passage.
const FIRST_ASKS: [&str; 4] = [
    "Can you summarise the main points in a few sentences?",
    "What are the key facts I should take away from it?",
    "Who are the main people or places here, and what happened?",
    "Please explain what this passage is about.",
];

/// How a later user turn introduces its part of the passage.
const FOLLOW_UPS: [&str; 5] = [
    "Thanks. Here is the next part of the same text.",
    "That helps. The passage continues like this.",
    "Here is another section from the same source.",
    "OK. Now read this part as well.",
    "Good. The article goes on.",
];

/// What a later user turn asks.
const QUESTIONS: [&str; 6] = [
    "How does this connect to what you said before?",
    "What are the important names and dates in this part?",
    "Does this change your earlier summary? Please update it.",
    "What is the most surprising detail here, and why?",
    "Summarise everything so far in three sentences.",
    "Is there anything here that contradicts the earlier parts?",
];

/// The committed WikiText-2 slice (CC BY-SA; `testdata/wikitext-2/SOURCE.md`), as words of
/// ordinary prose: WikiText's split punctuation (` , `, ` @-@ `, ` 's`) joined back and its
/// `= Heading =` lines left out.
fn prose_words() -> &'static [String] {
    static WORDS: OnceLock<Vec<String>> = OnceLock::new();
    WORDS.get_or_init(|| {
        let raw = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/wikitext-2/wiki.test.head.raw"
        ));
        let mut words: Vec<String> = Vec::new();
        for line in raw.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('=') {
                continue;
            }
            let mut glue_next = false;
            for tok in line.split_whitespace() {
                let joiner = matches!(tok, "@-@" | "@,@" | "@.@");
                let attach_left = joiner
                    || matches!(tok, "," | "." | ";" | ":" | ")" | "!" | "?" | "'s" | "'")
                    || tok.starts_with("n'");
                let piece = match tok {
                    "@-@" => "-",
                    "@,@" => ",",
                    "@.@" => ".",
                    t => t,
                };
                match words.last_mut() {
                    Some(last) if attach_left || glue_next => last.push_str(piece),
                    _ => words.push(piece.to_string()),
                }
                glue_next = joiner || tok == "(";
            }
        }
        words
    })
}

/// `n` consecutive words of the slice from a seeded place.
fn excerpt(rng: &mut Rng, n: usize) -> String {
    let words = prose_words();
    let n = n.min(words.len());
    let start = rng.below(words.len() - n + 1);
    words[start..start + n].join(" ")
}

/// An exponentially distributed wait of mean `mean_ms`, capped at ten means.
fn think_time(rng: &mut Rng, mean_ms: u64) -> Duration {
    // Uniform in (0, 1]: the top 53 bits, plus one.
    let u = ((rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
    let ms = (-u.ln()).min(10.0) * mean_ms as f64;
    Duration::from_secs_f64(ms / 1e3)
}

fn pick<'a>(rng: &mut Rng, from: &[&'a str]) -> &'a str {
    from[rng.below(from.len())]
}

/// Chat conversations sharing a system prompt, replayed turn by turn.
#[derive(Clone, Debug, Serialize)]
pub struct MultiTurn {
    /// Conversations in the run.
    pub conversations: usize,
    /// User turns per conversation (each one request).
    pub turns: usize,
    /// Words of WikiText-2 in a conversation's first user turn (the passage the
    /// conversation is about).
    pub first_turn_words: usize,
    /// Words of WikiText-2 in each later user turn.
    pub turn_words: usize,
    /// Concurrent clients; client `c` owns conversations `c`, `c + clients`, ….
    pub clients: usize,
    /// Conversations each client keeps open at once; when one ends, its next one opens.
    pub active: usize,
    /// Mean milliseconds a client waits after each answer before its next request (drawn
    /// from an exponential distribution by the client's seeded generator; 0: none). Besides
    /// a user's reading time it makes the clients' requests arrive in an order no client
    /// controls, as many independent users' do: without it three closed-loop clients of
    /// similar pace take turns in a fixed cycle, and round robin over three replicas then
    /// sends each client — and so each of its conversations — to the same replica every
    /// time.
    pub think_ms: u64,
    /// `max_tokens` of each request.
    pub max_tokens: usize,
    pub seed: u64,
}

impl MultiTurn {
    /// The user turns of conversation `i`, fixed by the seed (the answers between them are
    /// the model's).
    pub fn user_turns(&self, i: usize) -> Vec<String> {
        let mut rng = Rng::new(self.seed ^ (0x5bd1_e995 + i as u64 * 0x1000_0001));
        (0..self.turns)
            .map(|t| {
                if t == 0 {
                    let open = pick(&mut rng, &OPENERS);
                    let text = excerpt(&mut rng, self.first_turn_words);
                    let ask = pick(&mut rng, &FIRST_ASKS);
                    format!("{open}\n\n{text}\n\n{ask}")
                } else {
                    let follow = pick(&mut rng, &FOLLOW_UPS);
                    let text = excerpt(&mut rng, self.turn_words);
                    let ask = pick(&mut rng, &QUESTIONS);
                    format!("{follow}\n\n{text}\n\n{ask}")
                }
            })
            .collect()
    }

    fn run(&self, url: &str, on_completed: &(dyn Fn(usize) + Sync)) -> Outcome {
        let tally = Tally::new(self.conversations * self.turns);
        let t = Instant::now();
        let clients = self.clients.max(1);
        std::thread::scope(|s| {
            for c in 0..clients {
                let tally = &tally;
                s.spawn(move || self.client(c, clients, url, tally, on_completed));
            }
        });
        tally.finish(t)
    }

    /// Client `c`: its conversations, a few open at once, the next speaker picked at
    /// random among them, until all are done.
    fn client(
        &self,
        c: usize,
        clients: usize,
        url: &str,
        tally: &Tally,
        on_completed: &(dyn Fn(usize) + Sync),
    ) {
        struct Open {
            conv: usize,
            users: Vec<String>,
            messages: Vec<Value>,
        }
        let agent = agent();
        let url = format!("{url}/v1/chat/completions");
        let mut rng = Rng::new(self.seed ^ (0xc1 + c as u64 * 0x9e37_79b9));
        let mut waiting: VecDeque<usize> = (c..self.conversations).step_by(clients).collect();
        let mut open: Vec<Open> = Vec::new();
        loop {
            while open.len() < self.active.max(1) {
                let Some(conv) = waiting.pop_front() else {
                    break;
                };
                open.push(Open {
                    conv,
                    users: self.user_turns(conv),
                    messages: vec![json!({"role": "system", "content": SYSTEM_PROMPT})],
                });
            }
            if open.is_empty() {
                break;
            }
            let j = rng.below(open.len());
            let o = &mut open[j];
            let turn = o.messages.len() / 2;
            o.messages
                .push(json!({"role": "user", "content": o.users[turn]}));
            let body = json!({
                "messages": o.messages,
                "max_tokens": self.max_tokens,
                "temperature": 0,
                "stream": true,
            });
            let index = o.conv * self.turns + turn;
            let r = stream(&agent, &url, &body, |v| {
                v["choices"][0]["delta"]["content"].as_str()
            });
            let n = match r {
                Ok((ttft, answer)) => {
                    o.messages
                        .push(json!({"role": "assistant", "content": answer}));
                    let n = tally.record(index, Ok(ttft));
                    if turn + 1 == self.turns {
                        open.swap_remove(j);
                    }
                    n
                }
                Err(what) => {
                    // Without its answer the conversation cannot go on: its later turns
                    // fail unsent.
                    let mut n = tally.record(index, Err(what));
                    for later in turn + 1..self.turns {
                        n = tally.record(
                            o.conv * self.turns + later,
                            Err(format!("not sent: turn {turn} failed")),
                        );
                    }
                    open.swap_remove(j);
                    n
                }
            };
            on_completed(n);
            if self.think_ms > 0 {
                std::thread::sleep(think_time(&mut rng, self.think_ms));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Documents × questions

/// Documents each asked several questions: requests sharing a long document prefix with
/// distinct questions after it, in a seeded shuffled order.
#[derive(Clone, Debug, Serialize)]
pub struct Documents {
    /// Documents; every request of a group starts with the same document.
    pub groups: usize,
    /// Requests per group, each with its own question after the document.
    pub per_group: usize,
    /// Words of each document (about 1.15 tokens each with SmolLM2's tokenizer).
    pub prefix_words: usize,
    /// Concurrent clients.
    pub clients: usize,
    /// `max_tokens` of each request.
    pub max_tokens: usize,
    pub seed: u64,
}

const WORDS: [&str; 48] = [
    "river",
    "bridge",
    "stone",
    "market",
    "harbour",
    "winter",
    "lantern",
    "orchard",
    "granite",
    "canal",
    "tower",
    "meadow",
    "copper",
    "village",
    "signal",
    "ferry",
    "archive",
    "quarry",
    "mill",
    "valley",
    "ledger",
    "beacon",
    "timber",
    "chapel",
    "garden",
    "station",
    "forge",
    "island",
    "cellar",
    "harvest",
    "compass",
    "engine",
    "thread",
    "furnace",
    "summit",
    "tunnel",
    "pasture",
    "glacier",
    "workshop",
    "courtyard",
    "railway",
    "marsh",
    "school",
    "library",
    "factory",
    "theatre",
    "border",
    "pier",
];

impl Documents {
    /// The document of group `g`: a title naming it (so groups share no block) and
    /// seeded words.
    pub fn document(&self, g: usize) -> String {
        let mut rng = Rng::new(self.seed ^ (0x9e37 + g as u64 * 0x1000_0001));
        let mut s = format!("Document {g}. Notes from the town records, volume {g}:");
        for i in 0..self.prefix_words {
            s.push(' ');
            s.push_str(WORDS[rng.below(WORDS.len())]);
            if i % 12 == 11 {
                s.push('.');
            }
        }
        s
    }

    /// Every request as (group, prompt), in a seeded shuffled order.
    pub fn requests(&self) -> Vec<(usize, String)> {
        let docs: Vec<String> = (0..self.groups).map(|g| self.document(g)).collect();
        let mut v: Vec<(usize, String)> = (0..self.per_group)
            .flat_map(|q| {
                docs.iter().enumerate().map(move |(g, d)| {
                    (
                        g,
                        format!(
                            "{d}\nQuestion {q}: what does the record say about item {q}?\nAnswer:"
                        ),
                    )
                })
            })
            .collect();
        let mut rng = Rng::new(self.seed);
        for i in (1..v.len()).rev() {
            v.swap(i, rng.below(i + 1));
        }
        v
    }

    fn run(&self, url: &str, on_completed: &(dyn Fn(usize) + Sync)) -> Outcome {
        let requests = self.requests();
        let next = AtomicUsize::new(0);
        let tally = Tally::new(requests.len());
        let url = format!("{url}/v1/completions");
        let t = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..self.clients.max(1) {
                s.spawn(|| {
                    let agent = agent();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some((_, prompt)) = requests.get(i) else {
                            break;
                        };
                        let body = json!({
                            "prompt": prompt,
                            "max_tokens": self.max_tokens,
                            "temperature": 0,
                            "stream": true,
                        });
                        let r = stream(&agent, &url, &body, |v| v["choices"][0]["text"].as_str())
                            .map(|(ttft, _)| ttft);
                        on_completed(tally.record(i, r));
                    }
                });
            }
        });
        tally.finish(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> MultiTurn {
        MultiTurn {
            conversations: 4,
            turns: 3,
            first_turn_words: 120,
            turn_words: 40,
            clients: 2,
            active: 2,
            think_ms: 0,
            max_tokens: 8,
            seed: 7,
        }
    }

    #[test]
    fn wikitext_becomes_prose_without_split_punctuation_or_headings() {
        let text = prose_words().join(" ");
        assert!(prose_words().len() > 5000, "{} words", prose_words().len());
        for split in [" @-@ ", " @,@ ", " @.@ ", " , ", " . ", " 's ", "= "] {
            assert!(!text.contains(split), "{split:?} left in the prose");
        }
    }

    #[test]
    fn a_conversations_user_turns_are_fixed_by_the_seed_and_differ_between_conversations() {
        let m = small();
        let a = m.user_turns(0);
        assert_eq!(a.len(), m.turns);
        assert_eq!(a, m.user_turns(0));
        assert_ne!(a[0], m.user_turns(1)[0]);
        let other_seed = MultiTurn { seed: 8, ..small() };
        assert_ne!(a, other_seed.user_turns(0));
        // The first turn carries the longer passage.
        let words = |s: &str| s.split_whitespace().count();
        assert!(words(&a[0]) >= m.first_turn_words);
        assert!(words(&a[1]) >= m.turn_words && words(&a[1]) < m.first_turn_words);
    }

    #[test]
    fn think_times_average_their_mean_and_stay_under_ten_means() {
        let mut rng = Rng::new(3);
        let waits: Vec<f64> = (0..4000)
            .map(|_| think_time(&mut rng, 100).as_secs_f64() * 1e3)
            .collect();
        let mean = waits.iter().sum::<f64>() / waits.len() as f64;
        assert!((90.0..110.0).contains(&mean), "mean {mean} ms");
        assert!(waits.iter().all(|w| (0.0..=1000.0).contains(w)));
    }

    #[test]
    fn the_system_prompt_is_a_few_hundred_words() {
        let n = SYSTEM_PROMPT.split_whitespace().count();
        assert!((250..=400).contains(&n), "{n} words");
    }
}
