//! Behaviour of the paged cache on small, hand-built cases.

use kiln_kv::{KvCache, KvConfig, KvError, KvType, MissReason, PrefixEvent};

fn cfg(n_blocks: usize) -> KvConfig {
    KvConfig {
        n_layer: 2,
        n_kv_head: 1,
        head_dim_k: 4,
        head_dim_v: 4,
        k_type: KvType::F32,
        v_type: KvType::F32,
        block_size: 4,
        n_blocks,
        rotate: false,
    }
}

/// Appends `tokens` and writes, at every layer, K = V = [token, pos, layer, salt].
fn fill(c: &mut KvCache, id: kiln_kv::SeqId, tokens: &[u32], salt: f32) {
    let r = c.append(id, tokens).expect("append");
    for (pos, &t) in r.zip(tokens) {
        for l in 0..2 {
            let x = [t as f32, pos as f32, l as f32, salt];
            c.write(id, l, pos, &x, &x).expect("write");
        }
    }
}

fn read_k(c: &KvCache, id: kiln_kv::SeqId, layer: usize, pos: usize) -> [f32; 4] {
    let (mut k, mut v) = ([0.0; 4], [0.0; 4]);
    c.read(id, layer, pos, &mut k, &mut v).expect("read");
    k
}

#[test]
fn fork_shares_pages_until_first_write() {
    let mut c = KvCache::new(cfg(8)).expect("cache");
    let a = c.create_sequence(16);
    fill(&mut c, a, &[1, 2, 3, 4, 5, 6], 0.0);
    let b = c.fork_sequence(a).expect("fork");
    assert_eq!(c.block_table(a).unwrap(), c.block_table(b).unwrap());
    assert_eq!(c.stats().shared_blocks, 2);
    assert_eq!(c.stats().used_blocks, 2);
    // The child appends into the shared, partly filled second block: it gets a copy.
    fill(&mut c, b, &[7], 1.0);
    assert_eq!(c.stats().cow_copies, 1);
    assert_eq!(c.block_table(a).unwrap()[0], c.block_table(b).unwrap()[0]);
    assert_ne!(c.block_table(a).unwrap()[1], c.block_table(b).unwrap()[1]);
    // The parent's positions are untouched; the child sees the shared ones plus its own.
    assert_eq!(c.len(a).unwrap(), 6);
    assert_eq!(read_k(&c, b, 1, 5), [6.0, 5.0, 1.0, 0.0]);
    assert_eq!(read_k(&c, b, 0, 6), [7.0, 6.0, 0.0, 1.0]);
    // Overwriting a shared full block in the parent copies it too; the child keeps the old.
    c.write(a, 0, 1, &[9.0; 4], &[9.0; 4]).expect("write");
    assert_eq!(read_k(&c, a, 0, 1), [9.0; 4]);
    assert_eq!(read_k(&c, b, 0, 1), [2.0, 1.0, 0.0, 0.0]);
    assert_eq!(c.stats().cow_copies, 2);
}

#[test]
fn out_of_memory_reports_the_shortfall_and_changes_nothing() {
    let mut c = KvCache::new(cfg(3)).expect("cache");
    let a = c.create_sequence(32);
    fill(&mut c, a, &[1; 8], 0.0);
    let before = c.stats();
    let e = c
        .append(a, &[1; 9])
        .expect_err("needs 3 more blocks, 1 left");
    assert_eq!(
        e,
        KvError::OutOfMemory {
            needed: 3,
            available: 1
        }
    );
    assert!(e.to_string().contains("3 blocks needed, 1 available"));
    assert_eq!(c.stats(), before);
    assert_eq!(c.len(a).unwrap(), 8);
}

#[test]
fn stale_and_unknown_sequences_are_refused() {
    let mut c = KvCache::new(cfg(4)).expect("cache");
    let a = c.create_sequence(4);
    c.free_sequence(a).expect("free");
    let b = c.create_sequence(4);
    assert_eq!(a.index(), b.index(), "the slot is reused");
    assert!(matches!(c.len(a), Err(KvError::SequenceNotFound { .. })));
    assert!(matches!(
        c.free_sequence(a),
        Err(KvError::SequenceNotFound { .. })
    ));
    assert!(c.len(b).is_ok());
}

#[test]
fn access_past_the_end_or_layers_is_an_invalid_page_access() {
    let mut c = KvCache::new(cfg(4)).expect("cache");
    let a = c.create_sequence(4);
    fill(&mut c, a, &[1, 2], 0.0);
    let e = c
        .write(a, 0, 2, &[0.0; 4], &[0.0; 4])
        .expect_err("pos 2 of 2");
    assert!(
        matches!(e, KvError::InvalidPageAccess { pos: 2, len: 2, .. }),
        "{e}"
    );
    let e = c.layer_view(a, 2).err().expect("layer 2 of 2");
    assert!(
        matches!(e, KvError::InvalidPageAccess { layer: 2, .. }),
        "{e}"
    );
    let e = c
        .write(a, 0, 0, &[0.0; 3], &[0.0; 4])
        .expect_err("short row");
    assert!(matches!(e, KvError::RowLength { .. }), "{e}");
}

#[test]
fn a_prefix_hit_shares_whole_verified_blocks() {
    let mut c = KvCache::new(cfg(8)).expect("cache");
    let a = c.create_sequence(16);
    let prompt = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14];
    fill(&mut c, a, &prompt, 0.0);
    assert_eq!(c.commit(a).unwrap(), 2, "two full blocks become findable");
    c.free_sequence(a).expect("free");
    assert_eq!(c.stats().idle_cached_blocks, 2);
    assert_eq!(c.lookup_prefix(&prompt, prompt.len()), 8);

    let b = c.create_sequence(16);
    let hit = c
        .attach_prefix(b, &prompt, prompt.len() - 1)
        .expect("attach");
    assert_eq!(hit.tokens, 8);
    assert_eq!(read_k(&c, b, 1, 7), [12.0, 7.0, 1.0, 0.0]);
    let st = c.stats().prefix;
    assert_eq!((st.queries, st.hits, st.tokens_saved), (1, 1, 8));
    assert_eq!(
        st.tokens_queried, 10,
        "a query counts every token it looked up"
    );

    // A different second block: only the first is shared.
    let d = c.create_sequence(16);
    let other = [5, 6, 7, 8, 1, 1, 1, 1, 1];
    assert_eq!(c.attach_prefix(d, &other, 9).unwrap().tokens, 4);
    // A different first block: nothing, and the reason is recorded.
    let e = c.create_sequence(16);
    let hit = c.attach_prefix(e, &[1, 6, 7, 8, 9], 5).unwrap();
    assert_eq!(hit.miss, Some(MissReason::NeverSeen));
    let f = c.create_sequence(16);
    let hit = c.attach_prefix(f, &prompt[..3], 3).unwrap();
    assert_eq!(hit.miss, Some(MissReason::ShorterThanBlock));
    let st = c.stats().prefix;
    assert_eq!(
        (st.queries, st.hits, st.miss_never_seen, st.miss_short),
        (4, 2, 1, 1)
    );
    assert!((st.hit_rate() - 0.5).abs() < 1e-12);
}

#[test]
fn a_prefix_is_only_served_after_the_same_earlier_blocks() {
    // Block 2 of [A, B] is cached; a query [C, B] must not get it although block B's
    // tokens match: its KV was computed after A.
    let mut c = KvCache::new(cfg(8)).expect("cache");
    let a = c.create_sequence(16);
    fill(&mut c, a, &[1, 1, 1, 1, 2, 2, 2, 2], 0.0);
    c.commit(a).unwrap();
    let b = c.create_sequence(16);
    let hit = c.attach_prefix(b, &[3, 3, 3, 3, 2, 2, 2, 2, 0], 8).unwrap();
    assert_eq!(hit.tokens, 0);
}

#[test]
fn cached_blocks_are_evicted_least_recent_first_tail_before_head() {
    let mut c = KvCache::new(cfg(4)).expect("cache");
    let a = c.create_sequence(8);
    fill(&mut c, a, &[1, 1, 1, 1, 2, 2, 2, 2], 0.0);
    c.commit(a).unwrap();
    c.free_sequence(a).unwrap();
    let b = c.create_sequence(8);
    fill(&mut c, b, &[3, 3, 3, 3, 4, 4, 4, 4], 0.0);
    c.commit(b).unwrap();
    c.free_sequence(b).unwrap();
    assert_eq!(c.stats().idle_cached_blocks, 4);
    // One block is needed: the tail block of the older sequence goes.
    let d = c.create_sequence(4);
    fill(&mut c, d, &[9], 0.0);
    assert_eq!(c.stats().prefix.evictions, 1);
    assert_eq!(c.lookup_prefix(&[1, 1, 1, 1, 2, 2, 2, 2], 8), 4);
    assert_eq!(c.lookup_prefix(&[3, 3, 3, 3, 4, 4, 4, 4], 8), 8);
    // Using a cached prefix makes it recent: the next evictions take the other one.
    let e = c.create_sequence(8);
    assert_eq!(c.attach_prefix(e, &[1, 1, 1, 1, 0], 5).unwrap().tokens, 4);
    c.free_sequence(e).unwrap();
    let f = c.create_sequence(8);
    fill(&mut c, f, &[9, 9], 0.0);
    c.free_sequence(d).unwrap();
    assert_eq!(c.lookup_prefix(&[1, 1, 1, 1], 4), 4);
    assert_eq!(c.lookup_prefix(&[3, 3, 3, 3, 4, 4, 4, 4], 8), 4);
    // A query for the evicted block says so.
    let g = c.create_sequence(8);
    fill(&mut c, g, &[7], 0.0);
    let h = c.create_sequence(8);
    let miss = c.attach_prefix(h, &[2, 2, 2, 2, 2], 5).unwrap();
    assert_eq!(miss.miss, Some(MissReason::NeverSeen));
}

#[test]
fn an_evicted_first_block_is_reported_as_evicted() {
    let mut c = KvCache::new(cfg(1)).expect("cache");
    let a = c.create_sequence(4);
    fill(&mut c, a, &[1, 2, 3, 4], 0.0);
    c.commit(a).unwrap();
    c.free_sequence(a).unwrap();
    let b = c.create_sequence(4);
    fill(&mut c, b, &[5], 0.0);
    c.free_sequence(b).unwrap();
    let d = c.create_sequence(4);
    let hit = c.attach_prefix(d, &[1, 2, 3, 4, 5], 5).unwrap();
    assert_eq!(hit.miss, Some(MissReason::Evicted));
    assert_eq!(c.stats().prefix.miss_evicted, 1);
}

#[test]
fn compaction_closes_holes_and_keeps_every_vector() {
    let mut c = KvCache::new(cfg(8)).expect("cache");
    let ids: Vec<_> = (0..4)
        .map(|i| {
            let id = c.create_sequence(8);
            fill(&mut c, id, &[i; 6], i as f32);
            id
        })
        .collect();
    c.free_sequence(ids[0]).unwrap();
    c.free_sequence(ids[2]).unwrap();
    let f = c.fragmentation();
    assert_eq!((f.free_blocks, f.holes), (4, 2));
    let moved = c.compact();
    assert_eq!(moved, 2);
    let f = c.fragmentation();
    assert_eq!((f.holes, f.largest_free_region), (0, 4));
    for &id in [ids[1], ids[3]].iter() {
        for pos in 0..6 {
            assert_eq!(read_k(&c, id, 1, pos)[1], pos as f32);
        }
        assert!(c.block_table(id).unwrap().iter().all(|&b| b < 4));
    }
    assert_eq!(c.stats().compactions, 1);
}

#[test]
fn waste_counts_unfilled_slots_of_held_blocks() {
    let mut c = KvCache::new(cfg(8)).expect("cache");
    let a = c.create_sequence(8);
    fill(&mut c, a, &[1; 5], 0.0);
    let st = c.stats();
    assert_eq!((st.slots_allocated, st.slots_used), (8, 5));
    assert!((st.waste() - 3.0 / 8.0).abs() < 1e-12);
    assert_eq!(c.fragmentation().wasted_slots, 3);
    // A fork shares slots: nothing new is wasted.
    c.fork_sequence(a).unwrap();
    assert_eq!(c.stats().slots_allocated, 8);
}

#[test]
fn type_names_parse_and_unknown_ones_list_the_supported() {
    assert_eq!(
        KvType::parse_pair("q8_0").unwrap(),
        (KvType::Q8_0, KvType::Q8_0)
    );
    assert_eq!(
        KvType::parse_pair("Q4_0,f16").unwrap(),
        (KvType::Q4_0, KvType::F16)
    );
    let e = KvType::parse_pair("f16,q6_k").expect_err("q6_k");
    assert_eq!(
        e.to_string(),
        "KV cache type 'q6_k' is not supported; supported: f32, f16, q8_0, q4_0, q4_1, q5_0"
    );
}

#[test]
fn a_quantized_type_needs_whole_blocks_per_head() {
    let mut k = cfg(4);
    k.k_type = KvType::Q8_0;
    let e = KvCache::new(k).err().expect("head of 4 values");
    assert!(e.to_string().contains("blocks of 32 values"), "{e}");
}

#[test]
fn prefix_events_report_stored_blocks_parents_first_and_their_evictions() {
    let mut ev = Vec::new();
    // Not recording (the default): nothing kept.
    let mut quiet = KvCache::new(cfg(2)).expect("cache");
    let q = quiet.create_sequence(8);
    fill(&mut quiet, q, &[1, 2, 3, 4], 0.0);
    assert_eq!(quiet.commit(q).unwrap(), 1);
    quiet.drain_prefix_events(&mut ev);
    assert!(ev.is_empty(), "{ev:?}");

    let mut c = KvCache::new(cfg(4)).expect("cache");
    c.set_prefix_events(true);
    let a = c.create_sequence(16);
    fill(&mut c, a, &[1, 2, 3, 4], 0.0);
    c.commit(a).unwrap();
    c.free_sequence(a).unwrap();
    let b = c.create_sequence(16);
    fill(&mut c, b, &[5, 6, 7, 8, 9, 10, 11, 12, 13], 0.0);
    assert_eq!(c.commit(b).unwrap(), 2);
    c.drain_prefix_events(&mut ev);
    let [
        PrefixEvent::Stored {
            key: ka,
            parent: None,
            tokens: ta,
        },
        PrefixEvent::Stored {
            key: k1,
            parent: None,
            tokens: t1,
        },
        PrefixEvent::Stored {
            key: k2,
            parent: Some(p2),
            tokens: t2,
        },
    ] = &ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(ta, &[1, 2, 3, 4]);
    assert_eq!(t1, &[5, 6, 7, 8]);
    assert_eq!(t2, &[9, 10, 11, 12]);
    assert_eq!(p2, k1, "a block names the block before it as its parent");
    assert!(ka != k1 && k1 != k2);
    let ka = *ka;
    ev.clear();
    c.free_sequence(b).unwrap();

    // One free block (b's partial one) and three idle cached: a sequence of two blocks
    // takes the free one, then evicts the least recently used cached one (a's).
    let d = c.create_sequence(16);
    fill(&mut c, d, &[20, 21, 22, 23, 24, 25, 26, 27], 0.0);
    c.drain_prefix_events(&mut ev);
    assert_eq!(ev, [PrefixEvent::Removed { key: ka }]);
    assert_eq!(c.stats().prefix.evictions, 1);
    // Draining again gives nothing new; switched off, nothing is recorded.
    ev.clear();
    c.drain_prefix_events(&mut ev);
    assert!(ev.is_empty(), "{ev:?}");
    c.set_prefix_events(false);
    c.commit(d).unwrap();
    c.drain_prefix_events(&mut ev);
    assert!(ev.is_empty(), "{ev:?}");
}
