//! Constrained output: a grammar (GBNF-like text, or a JSON schema) compiled to a matcher
//! that masks the logits at each step.
//!
//! - [`Grammar::from_gbnf`] / [`Grammar::from_json_schema`] compile, within
//!   [`CompileLimits`] (states, repetition counts, wall time).
//! - [`GrammarCache`] keeps compiled grammars by source text.
//! - [`Matcher`] is the per-request state: [`Matcher::fill_mask`] gives the allowed tokens,
//!   [`Matcher::accept_token`] advances.

mod bounds;
mod gbnf;
mod ir;
mod json;
mod matcher;
mod nfa;
mod regex;
mod schema;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use matcher::Matcher;

/// Bounds on compilation, so a hostile or accidental grammar cannot take unbounded time
/// or memory.
#[derive(Clone, Debug, PartialEq)]
pub struct CompileLimits {
    /// Automaton states (each a few bytes of tables).
    pub max_states: usize,
    /// Largest `{m,n}` count, `minItems`/`maxItems`, `minLength`/`maxLength`.
    pub max_repeat: u32,
    /// Deepest JSON-schema nesting.
    pub max_schema_depth: usize,
    /// Wall-clock budget for one compilation.
    pub max_time: Duration,
}

impl Default for CompileLimits {
    fn default() -> Self {
        CompileLimits {
            max_states: 1 << 20,
            max_repeat: 4096,
            max_schema_depth: 64,
            max_time: Duration::from_secs(2),
        }
    }
}

/// Why a grammar or schema did not compile.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum GrammarError {
    #[error("grammar syntax error at line {line}, column {column}: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("the grammar has no `root` rule")]
    MissingRoot,
    #[error("rule `{rule}` is used but never defined")]
    UndefinedRule { rule: String },
    #[error("rule `{rule}` is defined twice")]
    DuplicateRule { rule: String },
    #[error("rule `{rule}` cannot derive any finite string")]
    UnproductiveRule { rule: String },
    #[error("rule `{rule}` is left-recursive (it can reach itself without reading a character)")]
    LeftRecursion { rule: String },
    #[error("repetition {{{min},{max}}} has max below min")]
    BadRepetition { min: u32, max: u32 },
    #[error("the grammar is too large: more than {limit} {what}")]
    TooLarge { what: &'static str, limit: usize },
    #[error("compilation took longer than {limit_ms} ms")]
    Timeout { limit_ms: u64 },
    #[error("the schema is not valid JSON: {0}")]
    SchemaJson(String),
    #[error("unsupported JSON-schema {what} at {path}: {detail} (supported: {supported})")]
    UnsupportedSchema {
        path: String,
        what: &'static str,
        detail: String,
        supported: &'static str,
    },
    #[error("invalid JSON schema at {path}: {detail}")]
    InvalidSchema { path: String, detail: String },
}

/// Why the matcher could not advance.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum MatchError {
    #[error("token {token} is not allowed by the grammar here")]
    TokenRejected { token: u32 },
    #[error("the grammar already accepted an end-of-generation token")]
    Finished,
    #[error("the grammar is too ambiguous: one step reached more than {limit} parser threads")]
    TooAmbiguous { limit: usize },
}

/// A compiled grammar, immutable and shareable between requests.
#[derive(Debug)]
pub struct Grammar {
    automaton: nfa::Automaton,
}

impl Grammar {
    /// Compiles GBNF-like text (llama.cpp's grammar syntax: `name ::= alternatives`,
    /// `"literals"`, `[classes]`, `.`, `( )`, `* + ?`, `{m}`, `{m,}`, `{m,n}`, `#`
    /// comments). Matching starts at the rule `root`.
    pub fn from_gbnf(src: &str) -> Result<Grammar, GrammarError> {
        Grammar::from_gbnf_with(src, &CompileLimits::default())
    }

    pub fn from_gbnf_with(src: &str, limits: &CompileLimits) -> Result<Grammar, GrammarError> {
        let ir = gbnf::parse(src)?;
        Ok(Grammar {
            automaton: nfa::compile(&ir, limits)?,
        })
    }

    /// Compiles a JSON schema (see `docs/sampling.md` for the supported subset) to the
    /// grammar of the JSON texts it accepts.
    pub fn from_json_schema(schema: &str) -> Result<Grammar, GrammarError> {
        Grammar::from_json_schema_with(schema, &CompileLimits::default())
    }

    pub fn from_json_schema_with(
        schema: &str,
        limits: &CompileLimits,
    ) -> Result<Grammar, GrammarError> {
        let ir = schema::compile(schema, limits)?;
        Ok(Grammar {
            automaton: nfa::compile(&ir, limits)?,
        })
    }

    /// Automaton states (a size measure).
    pub fn num_states(&self) -> usize {
        self.automaton.num_states()
    }

    /// Rule names (JSON schemas get generated names).
    pub fn rule_names(&self) -> &[String] {
        &self.automaton.rule_names
    }
}

/// What a grammar is compiled from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GrammarKind {
    Gbnf,
    JsonSchema,
}

/// Compiled grammars by `(kind, source text)`, least recently used evicted first.
#[derive(Debug)]
pub struct GrammarCache {
    capacity: usize,
    inner: Mutex<CacheInner>,
}

#[derive(Debug, Default)]
struct CacheInner {
    map: HashMap<(GrammarKind, String), Arc<Grammar>>,
    order: VecDeque<(GrammarKind, String)>,
}

impl GrammarCache {
    pub fn new(capacity: usize) -> GrammarCache {
        GrammarCache {
            capacity: capacity.max(1),
            inner: Mutex::new(CacheInner::default()),
        }
    }

    /// The compiled grammar for `src`, compiling it (outside the lock) on a miss.
    pub fn get_or_compile(
        &self,
        kind: GrammarKind,
        src: &str,
        limits: &CompileLimits,
    ) -> Result<Arc<Grammar>, GrammarError> {
        let key = (kind, src.to_string());
        if let Some(g) = self.lock().touch(&key) {
            return Ok(g);
        }
        let g = Arc::new(match kind {
            GrammarKind::Gbnf => Grammar::from_gbnf_with(src, limits)?,
            GrammarKind::JsonSchema => Grammar::from_json_schema_with(src, limits)?,
        });
        let mut inner = self.lock();
        if inner.map.insert(key.clone(), Arc::clone(&g)).is_none() {
            inner.order.push_back(key);
        }
        while inner.order.len() > self.capacity {
            if let Some(old) = inner.order.pop_front() {
                inner.map.remove(&old);
            }
        }
        Ok(g)
    }

    /// Number of cached grammars.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        // A panic while holding the lock leaves a consistent map: keep using it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl CacheInner {
    fn touch(&mut self, key: &(GrammarKind, String)) -> Option<Arc<Grammar>> {
        let g = self.map.get(key).cloned()?;
        if let Some(i) = self.order.iter().position(|k| k == key) {
            let k = self.order.remove(i);
            self.order.extend(k);
        }
        Some(g)
    }
}

#[cfg(test)]
mod tests;
