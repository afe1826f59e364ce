//! WGSL compute kernels. Each kernel is a `name.wgsl` file (the shader, with a header comment
//! giving its bindings and shapes) and a `name.rs` driver (parameters, validation, dispatch).
//! Every kernel has a plain-Rust twin in [`crate::reference`] with the same name.

pub mod attention;
pub mod embed;
pub mod logits_topk;
pub mod matmul_q8;
pub mod matmul_q8_norm;

/// Every kernel's WGSL source by name, for tests that check all shaders at once.
pub const ALL: &[(&str, &str)] = &[
    (attention::NAME, attention::SOURCE),
    (embed::NAME, embed::SOURCE),
    (logits_topk::NAME, logits_topk::SOURCE),
    (matmul_q8::NAME, matmul_q8::SOURCE),
    (matmul_q8_norm::NAME, matmul_q8_norm::SOURCE),
];

#[cfg(test)]
mod tests {
    use super::ALL;

    /// The conventions of `STYLE.md`: a header comment naming the kernel, the uniform params at
    /// binding 0, an entry point called `main`, and no unreplaced `{{placeholder}}`.
    #[test]
    fn kernels_follow_the_conventions() {
        for (name, source) in ALL {
            assert!(
                source.starts_with(&format!("// {name}: ")),
                "{name}.wgsl must open with `// {name}: what it computes`"
            );
            assert!(
                source.contains("@group(0) @binding(0) var<uniform> params: Params;"),
                "{name}.wgsl: binding 0 must be the uniform params"
            );
            assert!(
                source.contains("fn main("),
                "{name}.wgsl: entry point must be `main`"
            );
            assert!(
                !source.contains("{{"),
                "{name}.wgsl: unreplaced placeholder"
            );
        }
    }
}
