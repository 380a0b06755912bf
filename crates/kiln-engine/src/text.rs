//! The text of a token event without an allocation per token: [`TokenText`] is a string
//! lent from its request's [`TextPool`], which gets the string back (allocation kept) when
//! the receiver drops the text. After the first tokens, a request whose receiver keeps up
//! reuses the same few strings for every token.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, Mutex};

/// Strings a pool keeps at least: a receiver that keeps up holds the texts of at most two
/// steps (the one it is reading and the one being sent), one text per step without
/// speculation. A receiver holding more than the pool keeps lags; its surplus strings are
/// freed when it drops them.
const POOL_STRINGS: usize = 8;

/// The strings one request's texts are lent from.
#[derive(Debug)]
pub(crate) struct TextPool {
    /// Strings not lent (made up front, then returned by dropped texts); its capacity is
    /// the number of strings the pool keeps.
    free: Mutex<Vec<String>>,
    /// The capacity of a string the pool makes: room for any token's text.
    string_bytes: usize,
}

impl TextPool {
    /// A pool of `strings` strings of `string_bytes` bytes (at least [`POOL_STRINGS`]),
    /// all made now, so lending never allocates while the receiver holds no more than
    /// that many texts — even when a step sends several texts at once (speculation).
    pub fn new(string_bytes: usize, strings: usize) -> Arc<TextPool> {
        let strings = strings.max(POOL_STRINGS);
        let mut free = Vec::with_capacity(strings);
        free.extend((0..strings).map(|_| String::with_capacity(string_bytes)));
        Arc::new(TextPool {
            free: Mutex::new(free),
            string_bytes,
        })
    }

    /// `text` as a [`TokenText`]: in a string from the pool when there is one, else in a
    /// new one (an empty text takes no string).
    pub fn lend(self: &Arc<TextPool>, text: &str) -> TokenText {
        if text.is_empty() {
            return TokenText {
                text: String::new(),
                pool: None,
            };
        }
        let reused = self.free.lock().ok().and_then(|mut free| free.pop());
        let mut s = reused.unwrap_or_else(|| String::with_capacity(self.string_bytes));
        s.clear();
        s.push_str(text);
        TokenText {
            text: s,
            pool: Some(Arc::clone(self)),
        }
    }

    fn give_back(&self, s: String) {
        if let Ok(mut free) = self.free.lock()
            && free.len() < free.capacity()
        {
            free.push(s);
        }
    }
}

/// The text of a token event ([`crate::Event::Token`]): a `str` (through `Deref`) whose
/// string goes back to its request's pool when dropped, so streaming allocates no string
/// per token. Copy it (`to_string()`, `push_str`) to keep it.
pub struct TokenText {
    text: String,
    pool: Option<Arc<TextPool>>,
}

impl TokenText {
    /// The text.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl Deref for TokenText {
    type Target = str;

    fn deref(&self) -> &str {
        &self.text
    }
}

impl AsRef<str> for TokenText {
    fn as_ref(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for TokenText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for TokenText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.text, f)
    }
}

impl PartialEq<str> for TokenText {
    fn eq(&self, other: &str) -> bool {
        self.text == other
    }
}

impl PartialEq<&str> for TokenText {
    fn eq(&self, other: &&str) -> bool {
        self.text == *other
    }
}

impl Drop for TokenText {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.take() {
            pool.give_back(std::mem::take(&mut self.text));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_text_lends_its_string_to_the_next_one() {
        let pool = TextPool::new(16, POOL_STRINGS);
        let a = pool.lend("hello");
        assert_eq!(a, "hello");
        let ptr = a.as_ptr();
        drop(a);
        let b = pool.lend("world");
        assert_eq!(b.as_str(), "world");
        assert_eq!(b.as_ptr(), ptr, "the same string, reused");
    }

    #[test]
    fn an_empty_text_takes_no_string_and_a_lagging_receiver_gets_fresh_ones() {
        let pool = TextPool::new(16, POOL_STRINGS);
        assert!(pool.lend("").pool.is_none());
        let held: Vec<TokenText> = (0..2 * POOL_STRINGS).map(|_| pool.lend("x")).collect();
        assert!(held.iter().all(|t| t == "x"));
        drop(held);
        assert_eq!(pool.free.lock().unwrap().len(), POOL_STRINGS);
    }
}
