//! The names of a bundle's tensors, and the one way the bundle's layout differs from burn's.
//!
//! Names are the burn module paths (`decoder.layers.3.cross_attn.query.weight`), so the bundle,
//! the burn model and the GPU engine agree by construction. Everything that spells them goes
//! through here: the bundle's tensor list ([`super::tensor_specs`]), the GPU upload
//! (`infer::weights`), the exporter (`export`) and the burn loader (`model::load`).
//!
//! Layout: burn's `Linear` keeps its weight as `[d_in, d_out]`; the bundle keeps every linear
//! weight as `[d_out, d_in]` (output × input, the int8 layout of [`super::QuantizedMatrix`]).
//! Embeddings are `[vocab, d_model]` in both, and vectors need nothing.
//! [`burn_to_bundle`] and [`bundle_to_burn`] apply that rule, in one place.

/// One of the model's two stacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stack {
    /// `encoder.…`: self-attention and FFN per layer.
    Encoder,
    /// `decoder.…`: self-attention, cross-attention and FFN per layer.
    Decoder,
}

impl Stack {
    /// The stack's path prefix.
    pub const fn name(self) -> &'static str {
        match self {
            Stack::Encoder => "encoder",
            Stack::Decoder => "decoder",
        }
    }
}

/// The token embedding of `stack`, `{stack}.embed.embedding`: an int8 matrix
/// `[vocab, d_model]` without bias (the decoder's is also the tied output projection).
pub fn embedding(stack: Stack) -> String {
    format!("{}.embed.embedding", stack.name())
}

/// The four linear projections of one attention block, in bundle order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttentionNames {
    pub query: String,
    pub key: String,
    pub value: String,
    pub output: String,
}

impl AttentionNames {
    fn new(block: &str) -> Self {
        let proj = |p: &str| format!("{block}.{p}");
        Self {
            query: proj("query"),
            key: proj("key"),
            value: proj("value"),
            output: proj("output"),
        }
    }

    /// Query, key, value, output.
    pub fn all(&self) -> [&str; 4] {
        [&self.query, &self.key, &self.value, &self.output]
    }
}

/// The modules of one layer, in bundle order: self-attention and its LayerNorm, (decoder)
/// cross-attention and its LayerNorm, the FFN's two linear layers and their LayerNorm.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerNames {
    /// `….self_attn`.
    pub self_attn: AttentionNames,
    /// `….norm1`: the LayerNorm after self-attention.
    pub self_attn_norm: String,
    /// Decoder layers only: `….cross_attn` and `….norm2`, the LayerNorm after it.
    pub cross_attn: Option<(AttentionNames, String)>,
    /// `….ffn.linear1`: `d_model → d_ff`, followed by ReLU.
    pub ffn_linear1: String,
    /// `….ffn.linear2`: `d_ff → d_model`.
    pub ffn_linear2: String,
    /// The LayerNorm after the FFN: `….norm2` in the encoder, `….norm3` in the decoder.
    pub ffn_norm: String,
}

/// The modules of layer `l` of `stack`, `{stack}.layers.{l}.…`.
pub fn layer(stack: Stack, l: usize) -> LayerNames {
    let p = format!("{}.layers.{l}", stack.name());
    let (cross_attn, ffn_norm) = match stack {
        Stack::Encoder => (None, "norm2"),
        Stack::Decoder => (
            Some((
                AttentionNames::new(&format!("{p}.cross_attn")),
                format!("{p}.norm2"),
            )),
            "norm3",
        ),
    };
    LayerNames {
        self_attn: AttentionNames::new(&format!("{p}.self_attn")),
        self_attn_norm: format!("{p}.norm1"),
        cross_attn,
        ffn_linear1: format!("{p}.ffn.linear1"),
        ffn_linear2: format!("{p}.ffn.linear2"),
        ffn_norm: format!("{p}.{ffn_norm}"),
    }
}

const WEIGHT: &str = ".weight";
const SCALE: &str = "_scale";

/// The weight matrix of a linear or embedding module: `{module}.weight`.
pub fn weight(module: &str) -> String {
    format!("{module}{WEIGHT}")
}

/// The per-row int8 scales of `{module}.weight`: `{module}.weight_scale` (bundle only).
pub fn weight_scale(module: &str) -> String {
    format!("{module}{WEIGHT}{SCALE}")
}

/// The bias of a linear module: `{module}.bias`.
pub fn bias(module: &str) -> String {
    format!("{module}.bias")
}

/// The scale of a LayerNorm: `{norm}.gamma`.
pub fn gamma(norm: &str) -> String {
    format!("{norm}.gamma")
}

/// The shift of a LayerNorm: `{norm}.beta`.
pub fn beta(norm: &str) -> String {
    format!("{norm}.beta")
}

/// The module a weight belongs to: `x.y.weight` → `x.y`; `None` for other names.
pub fn module_of_weight(name: &str) -> Option<&str> {
    name.strip_suffix(WEIGHT)
}

/// Whether `name` is the per-row scale of an int8 matrix (a bundle tensor with no burn
/// parameter behind it).
pub fn is_weight_scale(name: &str) -> bool {
    name.strip_suffix(SCALE)
        .is_some_and(|weight| weight.ends_with(WEIGHT))
}

/// Whether `name` is the weight of a `Linear` module, the tensors whose layout differs between
/// burn (`[d_in, d_out]`) and the bundle (`[d_out, d_in]`): every `….weight` but the
/// embeddings'.
pub fn is_linear_weight(name: &str) -> bool {
    module_of_weight(name).is_some_and(|module| !module.ends_with("embed.embedding"))
}

/// Burn's values of parameter `name` (shape `burn_shape`) in the bundle's layout: linear
/// weights transposed to `[d_out, d_in]`, everything else unchanged.
pub fn burn_to_bundle(name: &str, burn_shape: &[usize], values: Vec<f32>) -> Vec<f32> {
    match burn_shape {
        &[d_in, d_out] if is_linear_weight(name) => transpose(&values, d_in, d_out),
        _ => values,
    }
}

/// The bundle's values of parameter `name` in burn's layout (`burn_shape`, the parameter's shape
/// in the model): linear weights transposed to `[d_in, d_out]`, everything else unchanged. The
/// inverse of [`burn_to_bundle`]. `values` must have as many elements as `burn_shape` holds.
pub fn bundle_to_burn(name: &str, burn_shape: &[usize], values: Vec<f32>) -> Vec<f32> {
    match burn_shape {
        &[d_in, d_out] if is_linear_weight(name) => transpose(&values, d_out, d_in),
        _ => values,
    }
}

/// `[rows, cols]` → `[cols, rows]`, row-major.
fn transpose(values: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    assert_eq!(
        values.len(),
        rows * cols,
        "transpose of a [{rows}, {cols}] matrix"
    );
    let mut out = vec![0.0; values.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = values[r * cols + c];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_burn_module_paths() {
        assert_eq!(embedding(Stack::Encoder), "encoder.embed.embedding");
        let dec = layer(Stack::Decoder, 3);
        let (cross, cross_norm) = dec.cross_attn.as_ref().expect("decoder layer");
        assert_eq!(
            weight(&cross.query),
            "decoder.layers.3.cross_attn.query.weight"
        );
        assert_eq!(cross_norm, "decoder.layers.3.norm2");
        assert_eq!(dec.ffn_norm, "decoder.layers.3.norm3");
        let enc = layer(Stack::Encoder, 0);
        assert_eq!(enc.cross_attn, None);
        assert_eq!(enc.ffn_norm, "encoder.layers.0.norm2");
        assert_eq!(
            weight_scale(&enc.ffn_linear1),
            "encoder.layers.0.ffn.linear1.weight_scale"
        );
        assert_eq!(gamma(&enc.self_attn_norm), "encoder.layers.0.norm1.gamma");
    }

    #[test]
    fn only_linear_weights_change_layout() {
        let linear = weight(&layer(Stack::Encoder, 0).self_attn.key);
        assert!(is_linear_weight(&linear));
        assert!(!is_linear_weight(&weight(&embedding(Stack::Decoder))));
        assert!(!is_linear_weight("encoder.layers.0.norm1.gamma"));
        assert!(!is_linear_weight(&weight_scale(
            "encoder.layers.0.ffn.linear1"
        )));
        assert!(is_weight_scale(&weight_scale("x")));
        assert!(!is_weight_scale(&weight("x")));
        assert_eq!(module_of_weight("a.b.weight"), Some("a.b"));

        // burn [d_in = 2, d_out = 3] → bundle [3, 2] → burn again.
        let burn = vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let bundle = burn_to_bundle(&linear, &[2, 3], burn.clone());
        assert_eq!(bundle, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
        assert_eq!(bundle_to_burn(&linear, &[2, 3], bundle), burn);
        let table = weight(&embedding(Stack::Encoder));
        assert_eq!(burn_to_bundle(&table, &[2, 3], burn.clone()), burn);
    }
}
