//! String storage and a string-to-id index over it: a vocabulary's texts live back to
//! back in one buffer (no allocation per token), and the index stores only ids.

use std::hash::BuildHasher;

use foldhash::fast::FixedState;
use hashbrown::HashTable;

/// Strings numbered from 0, stored contiguously.
#[derive(Default)]
pub(crate) struct Strings {
    data: String,
    /// `data[ends[i - 1]..ends[i]]` is string `i`.
    ends: Vec<usize>,
}

impl Strings {
    pub(crate) fn with_capacity(count: usize, bytes: usize) -> Strings {
        Strings {
            data: String::with_capacity(bytes),
            ends: Vec::with_capacity(count),
        }
    }

    pub(crate) fn push(&mut self, s: &str) {
        self.data.push_str(s);
        self.ends.push(self.data.len());
    }

    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(crate) fn get(&self, id: u32) -> Option<&str> {
        let i = id as usize;
        let end = *self.ends.get(i)?;
        let start = i.checked_sub(1).map_or(0, |p| self.ends[p]);
        self.data.get(start..end)
    }

    /// String `id`, or "" for an id out of range.
    pub(crate) fn str(&self, id: u32) -> &str {
        self.get(id).unwrap_or_default()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &str> {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let s = self.data.get(start..end).unwrap_or_default();
            start = end;
            s
        })
    }
}

/// Maps a string to its id among a [`Strings`] table.
#[derive(Default)]
pub(crate) struct StrIndex {
    table: HashTable<u32>,
    hasher: FixedState,
}

impl StrIndex {
    pub(crate) fn with_capacity(n: usize) -> StrIndex {
        StrIndex {
            table: HashTable::with_capacity(n),
            hasher: FixedState::default(),
        }
    }

    /// The id of `s` among `strings` (the table this index was built over).
    pub(crate) fn get(&self, strings: &Strings, s: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(s);
        self.table.find(hash, |&id| strings.str(id) == s).copied()
    }

    /// Indexes string `id` of `strings`; if an equal string is already indexed, returns
    /// that one's id instead.
    pub(crate) fn insert(&mut self, strings: &Strings, id: u32) -> Result<(), u32> {
        let s = strings.str(id);
        let hasher = self.hasher.clone();
        let hash = hasher.hash_one(s);
        match self.table.entry(
            hash,
            |&other| strings.str(other) == s,
            |&other| hasher.hash_one(strings.str(other)),
        ) {
            hashbrown::hash_table::Entry::Occupied(e) => Err(*e.get()),
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert(id);
                Ok(())
            }
        }
    }
}
