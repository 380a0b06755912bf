use kiln_format::{GgmlType, GgufFile, Metadata};

use super::*;

/// A donor with a 16-token vocabulary and one other tokenizer key.
fn donor() -> Metadata {
    let mut md = Metadata::new();
    let tokens: Vec<String> = (0..16).map(|i| format!("t{i}")).collect();
    md.set("tokenizer.ggml.tokens", tokens);
    md.set("tokenizer.ggml.model", "gpt2");
    md.set("general.name", "not copied");
    md
}

/// A model small enough to write in a test, with every row a multiple of 256.
fn tiny(family: Family, tied: bool) -> Shape {
    Shape {
        name: "tiny",
        family,
        n_embd: 256,
        n_ff: 512,
        n_layer: 3,
        n_head: 4,
        n_head_kv: 2,
        head_dim: 64,
        rope_theta: 10_000.0,
        norm_eps: 1e-6,
        tied,
        n_ctx_train: 512,
        llama3_rope: (family == Family::Llama).then_some(shapes::Llama3Rope {
            factor: 8.0,
            low_freq_factor: 1.0,
            high_freq_factor: 4.0,
            original_context: 8192.0,
        }),
        moe: matches!(family, Family::Olmoe | Family::Qwen3Moe).then_some(shapes::MoeShape {
            n_expert: 4,
            n_expert_used: 2,
            n_ff_exp: 256,
        }),
    }
}

fn write(shape: &Shape, mix: Mix) -> (GgufFile, Vec<TensorPlan>) {
    let (w, plans) = build(shape, mix, &donor()).expect("build");
    let mut bytes = Vec::new();
    w.write_streaming(&mut bytes, &mut filler(&plans, 7))
        .expect("write");
    (GgufFile::from_bytes(bytes).expect("parse"), plans)
}

#[test]
fn every_tensor_is_written_as_planned_and_decodes_to_small_centred_finite_values() {
    for family in [
        Family::Llama,
        Family::Qwen2,
        Family::Gemma2,
        Family::Olmoe,
        Family::Qwen3Moe,
    ] {
        for tied in [true, false] {
            for &(_, mix) in mix::MIXES {
                let shape = tiny(family, tied);
                let (file, plans) = write(&shape, mix);
                assert_eq!(file.tensors().len(), plans.len());
                for p in &plans {
                    let t = file.tensor(&p.name).expect("planned tensor present");
                    assert_eq!(t.info.ty, p.ty, "{}", p.name);
                    assert_eq!(t.info.dims, p.dims, "{}", p.name);
                    let n: u64 = p.dims.iter().product();
                    let mut v = vec![0f32; n as usize];
                    kiln_quant::dequantize_row(p.ty, t.data, &mut v).expect("dequantize");
                    assert!(v.iter().all(|x| x.is_finite()), "{} is not finite", p.name);
                    match &p.init {
                        Init::Ones => assert!(v.iter().all(|&x| x == 1.0), "{}", p.name),
                        Init::Values(want) => assert_eq!(&v, want, "{}", p.name),
                        Init::Random => {
                            let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
                            let mean = v.iter().sum::<f32>() / n as f32;
                            assert!(max > 0.0 && max < 0.08, "{} {:?}: max {max}", p.name, p.ty);
                            assert!(mean.abs() < 0.01, "{} {:?}: mean {mean}", p.name, p.ty);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn the_file_has_the_shape_metadata_and_the_donors_tokenizer() {
    let shape = tiny(Family::Gemma2, true);
    let (file, _) = write(&shape, Mix::Q8_0);
    let md = file.metadata();
    assert_eq!(file.architecture().unwrap(), "gemma2");
    assert_eq!(md.opt_u32("gemma2.block_count").unwrap(), Some(3));
    assert_eq!(
        md.opt_u32("gemma2.attention.head_count_kv").unwrap(),
        Some(2)
    );
    assert_eq!(md.opt_u32("gemma2.attention.key_length").unwrap(), Some(64));
    assert_eq!(
        md.opt_f32("gemma2.final_logit_softcapping").unwrap(),
        Some(30.0)
    );
    assert_eq!(md.opt_u32("general.file_type").unwrap(), Some(7));
    assert_eq!(md.str_array("tokenizer.ggml.tokens").unwrap().len(), 16);
    assert_eq!(md.opt_str("tokenizer.ggml.model").unwrap(), Some("gpt2"));
    assert_eq!(
        md.opt_str("general.name").unwrap(),
        Some("synthetic tiny q8_0"),
        "only tokenizer keys are borrowed"
    );
    let embd = file.tensor("token_embd.weight").unwrap();
    assert_eq!(
        embd.info.dims,
        [256, 16],
        "rows follow the donor's vocabulary"
    );
}

#[test]
fn writing_is_deterministic_for_a_seed() {
    let shape = tiny(Family::Llama, false);
    let (w, plans) = build(&shape, Mix::Q4KM, &donor()).unwrap();
    let bytes = |seed| {
        let mut b = Vec::new();
        w.write_streaming(&mut b, &mut filler(&plans, seed))
            .unwrap();
        b
    };
    assert_eq!(bytes(1), bytes(1));
    assert_ne!(bytes(1), bytes(2));
}

#[test]
fn llama_3_2_1b_q4_k_m_has_llama_quantizes_types_and_real_dimensions() {
    let s = shape("llama-3.2-1b").unwrap();
    let plans = plan(s, Mix::Q4KM, 49152);
    let get = |n: &str| {
        plans
            .iter()
            .find(|p| p.name == n)
            .unwrap_or_else(|| panic!("{n}"))
    };
    // 16 layers of 9 tensors, the embedding, RoPE factors, the final norm; tied output.
    assert_eq!(plans.len(), 16 * 9 + 3);
    assert!(plans.iter().all(|p| p.name != "output.weight"));
    assert_eq!(
        get("token_embd.weight").ty,
        GgmlType::Q6_K,
        "tied: the output's type"
    );
    assert_eq!(get("token_embd.weight").dims, [2048, 49152]);
    assert_eq!(get("blk.0.attn_q.weight").dims, [2048, 2048]);
    assert_eq!(
        get("blk.0.attn_k.weight").dims,
        [2048, 512],
        "GQA 32/8 × 64"
    );
    assert_eq!(get("blk.0.ffn_down.weight").dims, [8192, 2048]);
    assert_eq!(get("blk.0.attn_norm.weight").ty, GgmlType::F32);
    // use_more_bits on 16 layers: 0, 1, 4, 7, 10, 13, 14, 15.
    for i in 0..16 {
        let more = [0, 1, 4, 7, 10, 13, 14, 15].contains(&i);
        let want = if more { GgmlType::Q6_K } else { GgmlType::Q4_K };
        assert_eq!(get(&format!("blk.{i}.attn_v.weight")).ty, want, "layer {i}");
        assert_eq!(
            get(&format!("blk.{i}.ffn_down.weight")).ty,
            want,
            "layer {i}"
        );
        assert_eq!(get(&format!("blk.{i}.ffn_up.weight")).ty, GgmlType::Q4_K);
    }
    let rope = get("rope_freqs.weight");
    let Init::Values(f) = &rope.init else {
        panic!("rope factors are values")
    };
    assert_eq!(f.len(), 32);
    assert_eq!(f[0], 1.0, "short wavelengths are not scaled");
    assert_eq!(f[31], 32.0, "long wavelengths are divided by the factor");
}

#[test]
fn the_output_is_q6_k_except_in_q8_0_and_an_untied_embedding_keeps_the_base_type() {
    let s = shape("llama-3.1-8b").unwrap();
    let ty = |mix, name: &str| {
        plan(s, mix, 49152)
            .into_iter()
            .find(|p| p.name == name)
            .map(|p| p.ty)
    };
    assert_eq!(ty(Mix::Q4_0, "output.weight"), Some(GgmlType::Q6_K));
    assert_eq!(ty(Mix::Q4_0, "token_embd.weight"), Some(GgmlType::Q4_0));
    assert_eq!(ty(Mix::Q8_0, "output.weight"), Some(GgmlType::Q8_0));
    assert_eq!(ty(Mix::Q5KM, "blk.5.attn_q.weight"), Some(GgmlType::Q5_K));
    assert_eq!(ty(Mix::Q5KM, "blk.0.attn_v.weight"), Some(GgmlType::Q6_K));
}

#[test]
fn every_shape_has_rows_that_k_quants_can_hold() {
    for s in shapes::SHAPES {
        for d in [
            s.n_embd,
            s.n_ff,
            s.n_head * s.head_dim,
            s.n_head_kv * s.head_dim,
        ] {
            assert_eq!(d % 256, 0, "{}: {d}", s.name);
        }
        if let Some(m) = &s.moe {
            assert_eq!(m.n_ff_exp % 256, 0, "{}: {}", s.name, m.n_ff_exp);
        }
        assert_eq!(s.n_head % s.n_head_kv, 0, "{}", s.name);
    }
}

#[test]
fn moe_shapes_have_3d_expert_tensors_an_f32_router_and_their_expert_keys() {
    let olmoe = shapes::shape("olmoe-1b-7b").unwrap();
    let plans = plan(olmoe, Mix::Q4KM, 49_152);
    let ty = |name: &str| {
        plans
            .iter()
            .find(|p| p.name == name)
            .map(|p| (p.ty, p.dims.clone()))
    };
    assert_eq!(
        ty("blk.0.ffn_gate_exps.weight"),
        Some((GgmlType::Q4_K, vec![2048, 1024, 64]))
    );
    assert_eq!(
        ty("blk.0.ffn_down_exps.weight"),
        Some((GgmlType::Q6_K, vec![1024, 2048, 64]))
    );
    assert_eq!(
        ty("blk.3.ffn_down_exps.weight"),
        Some((GgmlType::Q4_K, vec![1024, 2048, 64]))
    );
    assert_eq!(
        ty("blk.0.ffn_gate_inp.weight"),
        Some((GgmlType::F32, vec![2048, 64]))
    );
    assert_eq!(
        ty("blk.0.attn_q_norm.weight"),
        Some((GgmlType::F32, vec![2048]))
    );
    assert_eq!(ty("blk.0.ffn_up.weight"), None);
    let q3 = shapes::shape("qwen3-30b-a3b").unwrap();
    let plans = plan(q3, Mix::Q4_0, 151_936);
    let ty = |name: &str| {
        plans
            .iter()
            .find(|p| p.name == name)
            .map(|p| (p.ty, p.dims.clone()))
    };
    assert_eq!(
        ty("blk.47.ffn_up_exps.weight"),
        Some((GgmlType::Q4_0, vec![2048, 768, 128]))
    );
    assert_eq!(
        ty("blk.0.attn_k_norm.weight"),
        Some((GgmlType::F32, vec![128]))
    );

    let shape = tiny(Family::Qwen3Moe, false);
    let (file, _) = write(&shape, Mix::Q4KM);
    let md = file.metadata();
    assert_eq!(md.str("general.architecture").unwrap(), "qwen3moe");
    assert_eq!(md.u64("qwen3moe.expert_count").unwrap(), 4);
    assert_eq!(md.u64("qwen3moe.expert_used_count").unwrap(), 2);
    assert_eq!(md.u64("qwen3moe.expert_feed_forward_length").unwrap(), 256);
}

#[test]
fn unknown_shapes_and_mixes_are_refused_with_the_known_names() {
    let err = lookup("llama-9b", "q4_k_m").unwrap_err().to_string();
    assert!(
        err.contains("llama-9b") && err.contains(&shape_names()),
        "{err}"
    );
    assert!(
        err.contains("llama-3.1-8b") && err.contains("gemma-2-2b"),
        "{err}"
    );
    let err = lookup("llama-3.2-1b", "q3_k").unwrap_err().to_string();
    assert!(
        err.contains("q3_k") && err.contains("q4_0, q4_k_m, q5_k_m, q8_0"),
        "{err}"
    );
    assert!(
        lookup("qwen2.5-7b", "Q4_K_M").is_ok(),
        "mix names ignore case"
    );
}

#[test]
fn a_layer_count_keeps_the_widths_and_is_refused_outside_the_models_layers() {
    let q3 = shapes::shape("qwen3-30b-a3b").unwrap();
    let cut = with_layers(q3, 6).expect("6 of 48 layers");
    assert_eq!(cut.n_layer, 6);
    assert_eq!(Shape { n_layer: 48, ..cut }, *q3);
    let plans = plan(&cut, Mix::Q4KM, 151_936);
    assert!(plans.iter().any(|p| p.name == "blk.5.ffn_down_exps.weight"));
    assert!(!plans.iter().any(|p| p.name.starts_with("blk.6.")));
    for bad in [0, 49] {
        let e = with_layers(q3, bad).unwrap_err().to_string();
        assert!(e.contains("has 48 layers; give 1 to 48"), "{bad}: {e}");
    }
}
