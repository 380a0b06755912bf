//! Random sequences of allocate / extend / append / write / fork / truncate / free / commit /
//! prefix attach / compact, checked after every step against a simple model: each sequence
//! is a list of positions with the exact vectors written there. After every step: every
//! sequence reads back exactly its model (so a write to a child never changes a parent),
//! reference counts equal the number of block tables naming each block, no block leaks,
//! and every prefix hit serves vectors some sequence committed for exactly those tokens.

use std::collections::{HashMap, HashSet};

use kiln_kv::{KvCache, KvConfig, KvError, KvType, SeqId};
use proptest::prelude::*;

const LAYERS: usize = 2;
const HEADS: usize = 2;
const HK: usize = 4;
const HV: usize = 3;
const BS: usize = 4;
const BLOCKS: usize = 20;
const KD: usize = HEADS * HK;
const VD: usize = HEADS * HV;

#[derive(Clone, Debug)]
enum Op {
    Allocate(usize),
    Extend(usize, usize),
    Append(usize, Vec<u32>),
    Write(usize, usize, usize),
    Fork(usize),
    Truncate(usize, usize),
    Free(usize),
    Commit(usize),
    Attach(usize, usize, Vec<u32>),
    Compact,
}

fn op() -> impl Strategy<Value = Op> {
    let toks = prop::collection::vec(0u32..2, 1..11);
    prop_oneof![
        1 => (0usize..9).prop_map(Op::Allocate),
        1 => (any::<usize>(), 0usize..9).prop_map(|(s, n)| Op::Extend(s, n)),
        5 => (any::<usize>(), toks.clone()).prop_map(|(s, t)| Op::Append(s, t)),
        3 => (any::<usize>(), any::<usize>(), 0..LAYERS).prop_map(|(s, p, l)| Op::Write(s, p, l)),
        2 => any::<usize>().prop_map(Op::Fork),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(s, n)| Op::Truncate(s, n)),
        2 => any::<usize>().prop_map(Op::Free),
        2 => any::<usize>().prop_map(Op::Commit),
        2 => (any::<usize>(), 0usize..12, toks).prop_map(|(s, n, t)| Op::Attach(s, n, t)),
        1 => Just(Op::Compact),
    ]
}

/// One position: its token and the vectors of every layer.
#[derive(Clone, Debug, PartialEq)]
struct Pos {
    token: u32,
    k: [[f32; KD]; LAYERS],
    v: [[f32; VD]; LAYERS],
}

struct Model {
    seqs: Vec<(SeqId, Vec<Pos>)>,
    /// Block contents committed per token prefix (the prefix through the block's end).
    committed: HashMap<Vec<u32>, HashSet<Vec<u32>>>,
    next_value: f32,
}

impl Model {
    fn fresh(&mut self) -> f32 {
        self.next_value += 1.0;
        self.next_value
    }

    fn vectors(&mut self, token: u32) -> Pos {
        let mut p = Pos {
            token,
            k: [[0.0; KD]; LAYERS],
            v: [[0.0; VD]; LAYERS],
        };
        for l in 0..LAYERS {
            for x in p.k[l].iter_mut() {
                *x = self.fresh();
            }
            for x in p.v[l].iter_mut() {
                *x = self.fresh();
            }
        }
        p
    }
}

fn bits_of(ps: &[Pos]) -> Vec<u32> {
    ps.iter()
        .flat_map(|p| {
            p.k.iter()
                .flatten()
                .chain(p.v.iter().flatten())
                .map(|x| x.to_bits())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn read_all(c: &KvCache, id: SeqId, len: usize) -> Vec<Pos> {
    (0..len)
        .map(|pos| {
            let mut p = Pos {
                token: 0,
                k: [[0.0; KD]; LAYERS],
                v: [[0.0; VD]; LAYERS],
            };
            for l in 0..LAYERS {
                c.read(id, l, pos, &mut p.k[l], &mut p.v[l]).expect("read");
            }
            p
        })
        .collect()
}

fn write_pos(c: &mut KvCache, id: SeqId, pos: usize, p: &Pos) -> Result<(), KvError> {
    for l in 0..LAYERS {
        c.write(id, l, pos, &p.k[l], &p.v[l])?;
    }
    Ok(())
}

fn check(c: &KvCache, m: &Model) {
    let st = c.stats();
    assert_eq!(st.active_sequences, m.seqs.len());
    let mut refs: HashMap<u32, u32> = HashMap::new();
    for (id, ps) in &m.seqs {
        assert_eq!(c.len(*id).expect("len"), ps.len());
        let got = read_all(c, *id, ps.len());
        for (i, (g, w)) in got.iter().zip(ps).enumerate() {
            assert_eq!((g.k, g.v), (w.k, w.v), "sequence {id} position {i}");
        }
        for &b in c.block_table(*id).expect("table") {
            *refs.entry(b).or_default() += 1;
        }
    }
    for b in 0..BLOCKS as u32 {
        assert_eq!(
            c.ref_count(b),
            refs.get(&b).copied().unwrap_or(0),
            "reference count of block {b}"
        );
    }
    assert_eq!(st.used_blocks, refs.len(), "held blocks");
    assert_eq!(
        st.used_blocks + st.idle_cached_blocks + st.free_blocks,
        BLOCKS,
        "every block is held, idle cached or free"
    );
    assert_eq!(st.tokens, m.seqs.iter().map(|s| s.1.len()).sum::<usize>());
    assert!(st.slots_used <= st.slots_allocated);
}

fn run(ops: Vec<Op>) {
    let cfg = KvConfig {
        n_layer: LAYERS,
        n_kv_head: HEADS,
        head_dim_k: HK,
        head_dim_v: HV,
        k_type: KvType::F32,
        v_type: KvType::F32,
        block_size: BS,
        n_blocks: BLOCKS,
        rotate: false,
    };
    let mut c = KvCache::new(cfg).expect("cache");
    let mut m = Model {
        seqs: Vec::new(),
        committed: HashMap::new(),
        next_value: 0.0,
    };
    let pick = |m: &Model, s: usize| (!m.seqs.is_empty()).then(|| s % m.seqs.len());
    for op in ops {
        match op {
            Op::Allocate(n) => match c.allocate(n) {
                Ok(id) => m.seqs.push((id, Vec::new())),
                Err(e) => assert!(matches!(e, KvError::OutOfMemory { .. }), "{e}"),
            },
            Op::Extend(s, n) => {
                if let Some(i) = pick(&m, s) {
                    let r = c.extend(m.seqs[i].0, n);
                    assert!(matches!(r, Ok(()) | Err(KvError::OutOfMemory { .. })));
                }
            }
            Op::Append(s, toks) => {
                if let Some(i) = pick(&m, s) {
                    let id = m.seqs[i].0;
                    match c.append(id, &toks) {
                        Ok(range) => {
                            assert_eq!(range.start, m.seqs[i].1.len());
                            for (pos, &t) in range.zip(&toks) {
                                let p = m.vectors(t);
                                write_pos(&mut c, id, pos, &p).expect("write after append");
                                m.seqs[i].1.push(p);
                            }
                        }
                        Err(e) => assert!(matches!(e, KvError::OutOfMemory { .. }), "{e}"),
                    }
                }
            }
            Op::Write(s, pos, layer) => {
                if let Some(i) = pick(&m, s)
                    && !m.seqs[i].1.is_empty()
                {
                    let pos = pos % m.seqs[i].1.len();
                    let mut p = m.seqs[i].1[pos].clone();
                    for x in p.k[layer].iter_mut().chain(p.v[layer].iter_mut()) {
                        *x = m.fresh();
                    }
                    match c.write(m.seqs[i].0, layer, pos, &p.k[layer], &p.v[layer]) {
                        Ok(()) => m.seqs[i].1[pos] = p,
                        Err(e) => assert!(matches!(e, KvError::OutOfMemory { .. }), "{e}"),
                    }
                }
            }
            Op::Fork(s) => {
                if let Some(i) = pick(&m, s) {
                    let child = c.fork_sequence(m.seqs[i].0).expect("fork never allocates");
                    let ps = m.seqs[i].1.clone();
                    m.seqs.push((child, ps));
                }
            }
            Op::Truncate(s, n) => {
                if let Some(i) = pick(&m, s) {
                    let n = n % (m.seqs[i].1.len() + 1);
                    c.truncate(m.seqs[i].0, n).expect("truncate");
                    m.seqs[i].1.truncate(n);
                }
            }
            Op::Free(s) => {
                if let Some(i) = pick(&m, s) {
                    let (id, _) = m.seqs.swap_remove(i);
                    c.free_sequence(id).expect("free");
                    assert!(matches!(c.len(id), Err(KvError::SequenceNotFound { .. })));
                }
            }
            Op::Commit(s) => {
                if let Some(i) = pick(&m, s) {
                    c.commit(m.seqs[i].0).expect("commit");
                    let ps = &m.seqs[i].1;
                    for b in 0..ps.len() / BS {
                        let prefix: Vec<u32> = ps[..(b + 1) * BS].iter().map(|p| p.token).collect();
                        m.committed
                            .entry(prefix)
                            .or_default()
                            .insert(bits_of(&ps[b * BS..(b + 1) * BS]));
                    }
                }
            }
            Op::Attach(s, max, extra) => {
                // Query: an existing sequence's tokens (if any) followed by `extra`.
                let mut q: Vec<u32> = pick(&m, s)
                    .map(|i| m.seqs[i].1.iter().map(|p| p.token).collect())
                    .unwrap_or_default();
                q.extend(&extra);
                let id = c.create_sequence(q.len());
                let hit = c.attach_prefix(id, &q, max).expect("attach");
                assert!(hit.tokens.is_multiple_of(BS) && hit.tokens <= max.min(q.len()));
                assert_eq!(hit.tokens == 0, hit.miss.is_some());
                let mut got = read_all(&c, id, hit.tokens);
                for (b, chunk) in got.chunks(BS).enumerate() {
                    let prefix = q[..(b + 1) * BS].to_vec();
                    let ok = m
                        .committed
                        .get(&prefix)
                        .is_some_and(|set| set.contains(&bits_of(chunk)));
                    assert!(
                        ok,
                        "prefix hit served vectors never committed for {prefix:?}"
                    );
                }
                for (p, &t) in got.iter_mut().zip(&q) {
                    p.token = t;
                }
                m.seqs.push((id, got));
            }
            Op::Compact => {
                c.compact();
                let f = c.fragmentation();
                assert_eq!(f.holes, 0, "no held block after an unused one");
            }
        }
        check(&c, &m);
    }
    for (id, _) in m.seqs.drain(..) {
        c.free_sequence(id).expect("free");
    }
    let st = c.stats();
    assert_eq!(st.used_blocks, 0, "blocks leaked");
    assert_eq!(st.idle_cached_blocks + st.free_blocks, BLOCKS);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn cache_matches_a_simple_model(ops in prop::collection::vec(op(), 1..60)) {
        run(ops);
    }
}
