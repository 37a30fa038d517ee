//! llama.cpp's file types (`llama_ftype`, include/llama.h, llama.cpp 0c1e570): each names a
//! default tensor type and a mix of per-tensor rules (`mix`), and is written into
//! `general.file_type` by its number.

use super::QuantizeError;
use tinynn::quant::GgmlType;

/// The file types `toy quantize` writes, by llama-quantize's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum FileType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q2_K,
    Q2_K_S,
    Q3_K_S,
    Q3_K_M,
    Q3_K_L,
    Q4_K_S,
    Q4_K_M,
    Q5_K_S,
    Q5_K_M,
    Q6_K,
    IQ4_NL,
    IQ4_XS,
    IQ3_S,
    IQ3_M,
    IQ3_XS,
    IQ3_XXS,
    IQ2_M,
    IQ2_S,
    IQ2_XS,
    IQ2_XXS,
}

/// llama-quantize's file types toy does not write yet.
const NOT_YET: [&str; 12] = [
    "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M",
    "TQ1_0", "TQ2_0",
];

impl FileType {
    pub const ALL: [FileType; 28] = {
        use FileType::*;
        [
            F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q2_K_S, Q3_K_S, Q3_K_M, Q3_K_L,
            Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS, IQ3_S, IQ3_M, IQ3_XS, IQ3_XXS,
            IQ2_M, IQ2_S, IQ2_XS, IQ2_XXS,
        ]
    };

    pub fn name(self) -> &'static str {
        use FileType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            BF16 => "BF16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q2_K => "Q2_K",
            Q2_K_S => "Q2_K_S",
            Q3_K_S => "Q3_K_S",
            Q3_K_M => "Q3_K_M",
            Q3_K_L => "Q3_K_L",
            Q4_K_S => "Q4_K_S",
            Q4_K_M => "Q4_K_M",
            Q5_K_S => "Q5_K_S",
            Q5_K_M => "Q5_K_M",
            Q6_K => "Q6_K",
            IQ4_NL => "IQ4_NL",
            IQ4_XS => "IQ4_XS",
            IQ3_S => "IQ3_S",
            IQ3_M => "IQ3_M",
            IQ3_XS => "IQ3_XS",
            IQ3_XXS => "IQ3_XXS",
            IQ2_M => "IQ2_M",
            IQ2_S => "IQ2_S",
            IQ2_XS => "IQ2_XS",
            IQ2_XXS => "IQ2_XXS",
        }
    }

    /// `general.file_type`: the `llama_ftype` number.
    pub fn id(self) -> u32 {
        use FileType::*;
        match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q8_0 => 7,
            Q5_0 => 8,
            Q5_1 => 9,
            Q2_K => 10,
            Q3_K_S => 11,
            Q3_K_M => 12,
            Q3_K_L => 13,
            Q4_K_S => 14,
            Q4_K_M => 15,
            Q5_K_S => 16,
            Q5_K_M => 17,
            Q6_K => 18,
            Q2_K_S => 21,
            IQ4_NL => 25,
            IQ4_XS => 30,
            BF16 => 32,
            IQ2_XXS => 19,
            IQ2_XS => 20,
            IQ3_XS => 22,
            IQ3_XXS => 23,
            IQ3_S => 26,
            IQ3_M => 27,
            IQ2_S => 28,
            IQ2_M => 29,
        }
    }

    /// The type of every tensor the mix does not move (`llama_ftype_get_default_type`).
    pub fn default_type(self) -> GgmlType {
        use FileType::*;
        match self {
            F32 => GgmlType::F32,
            F16 => GgmlType::F16,
            BF16 => GgmlType::BF16,
            Q4_0 => GgmlType::Q4_0,
            Q4_1 => GgmlType::Q4_1,
            Q5_0 => GgmlType::Q5_0,
            Q5_1 => GgmlType::Q5_1,
            Q8_0 => GgmlType::Q8_0,
            Q2_K | Q2_K_S => GgmlType::Q2_K,
            Q3_K_S | Q3_K_M | Q3_K_L => GgmlType::Q3_K,
            Q4_K_S | Q4_K_M => GgmlType::Q4_K,
            Q5_K_S | Q5_K_M => GgmlType::Q5_K,
            Q6_K => GgmlType::Q6_K,
            IQ4_NL => GgmlType::IQ4_NL,
            IQ4_XS => GgmlType::IQ4_XS,
            IQ3_S | IQ3_M | IQ3_XS => GgmlType::IQ3_S,
            IQ3_XXS => GgmlType::IQ3_XXS,
            IQ2_M => GgmlType::IQ2_S,
            IQ2_S | IQ2_XS => GgmlType::IQ2_XS,
            IQ2_XXS => GgmlType::IQ2_XXS,
        }
    }

    /// By llama-quantize's name, case-insensitive; `Q3_K`, `Q4_K`, `Q5_K` are its `_M`.
    pub fn parse(s: &str) -> Result<Self, QuantizeError> {
        let up = s.to_ascii_uppercase();
        let up = match up.as_str() {
            "Q3_K" => "Q3_K_M",
            "Q4_K" => "Q4_K_M",
            "Q5_K" => "Q5_K_M",
            other => other,
        };
        if let Some(t) = Self::ALL.iter().find(|t| t.name() == up) {
            return Ok(*t);
        }
        let known = Self::ALL.map(|t| t.name()).join(", ");
        if NOT_YET.contains(&up) {
            return Err(QuantizeError::NotYet(up.to_string(), known));
        }
        Err(QuantizeError::UnknownType(s.to_string(), known))
    }
}
