//! Opening a device in tests. GPU tests run on lavapipe in CI; where no adapter exists they
//! fail when `REQUIRE_GPU=1` (as the README's test command sets) and print a skip otherwise.

use super::Gpu;

/// The default adapter's device, or `None` (after printing why) when there is no adapter and
/// `REQUIRE_GPU` is not `1`.
///
/// # Panics
/// When no device can be opened and `REQUIRE_GPU=1`.
pub fn gpu_or_skip(test: &str) -> Option<Gpu> {
    match pollster::block_on(Gpu::new()) {
        Ok(gpu) => Some(gpu),
        Err(e) if std::env::var("REQUIRE_GPU").as_deref() == Ok("1") => {
            panic!("{test}: REQUIRE_GPU=1 but no GPU device could be opened: {e}")
        }
        Err(e) => {
            eprintln!("SKIPPED {test}: {e} (set REQUIRE_GPU=1 to make this a failure)");
            None
        }
    }
}
