//! WGSL compute kernels. Each kernel is a `name.wgsl` file (the shader, with a header comment
//! giving its bindings and shapes) and a `name.rs` driver (parameters, validation, dispatch).
//! Every kernel has a plain-Rust twin in [`crate::reference`] with the same name, except
//! `logits_topk`, whose oracle is [`crate::reference::penalized_logprobs`] followed by the
//! search's own top-k.
//!
//! Constants that Rust and WGSL both need are written once, in Rust, and reach the shader as
//! WGSL `override` constants set at pipeline creation ([`crate::gpu::PipelineKey::with`]) — the
//! workgroup sizes, with no default in WGSL. Where WGSL needs a compile-time constant (the size
//! of a function-scope or nested array), the shader keeps a `const` and a test beside the driver
//! reads the `.wgsl` source and checks it against the Rust constant ([`wgsl_const`]).
//!
//! WGSL has no includes: helpers shared by several kernels live in `int8.wgsl`, which the
//! drivers that need it append to their kernel's source (`concat!` in their `SOURCE`).

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

/// The value of `const {name}: u32 = {value}u;` in a WGSL source; `None` when there is no such
/// line. For the tests that check a shader's compile-time constants against the driver's.
#[cfg(test)]
pub(crate) fn wgsl_const(source: &str, name: &str) -> Option<usize> {
    let declaration = format!("const {name}: u32 = ");
    source
        .lines()
        .find_map(|line| line.strip_prefix(declaration.as_str()))
        .and_then(|value| value.strip_suffix("u;"))
        .and_then(|value| value.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::{ALL, wgsl_const};

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

    /// Workgroup sizes come from a WGSL constant or override, never a literal that a Rust
    /// driver would have to mirror; shared helpers are defined once.
    #[test]
    fn no_hand_mirrored_literals_or_copied_helpers() {
        for (name, source) in ALL {
            for (i, _) in source.match_indices("@workgroup_size(") {
                let size = &source[i + "@workgroup_size(".len()..];
                assert!(
                    !size.starts_with(|c: char| c.is_ascii_digit()),
                    "{name}.wgsl: literal workgroup size; use an override set from Rust"
                );
            }
            assert!(
                source.matches("fn unpack_i8x4(").count() <= 1,
                "{name}: unpack_i8x4 defined more than once; it lives in int8.wgsl"
            );
        }
    }

    #[test]
    fn wgsl_constants_are_read_back() {
        let source = "const A: u32 = 8u;\nconst BB: u32 = 256u;\nconst C: f32 = 1.0;\n";
        assert_eq!(wgsl_const(source, "A"), Some(8));
        assert_eq!(wgsl_const(source, "BB"), Some(256));
        assert_eq!(wgsl_const(source, "B"), None);
        assert_eq!(wgsl_const(source, "C"), None);
    }
}
