//! GPU access for both targets: WebGPU in the browser, Vulkan/Metal/DX12 natively.
//!
//! [`Gpu`] owns the device and queue, a [`PipelineCache`] and the one async readback API
//! ([`Gpu::read_f32`]) that native code and the page share. This is the only module that
//! knows which target it runs on: natively, mapping a buffer needs an explicit device poll;
//! in the browser the event loop drives it.

mod buffer;
mod pipeline;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

pub use buffer::DispatchPool;
pub use pipeline::{PipelineCache, PipelineKey};

use serde::Serialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Errors from GPU setup and GPU work. Each message says what the user can do about it.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// The browser has no WebGPU (`navigator.gpu` is missing or gives no adapter).
    #[error(
        "WebGPU is not available in this browser. Use a recent Chrome or Edge (version 113 or \
         later) or Firefox 141 or later on Windows, Safari 26 or later on macOS; on Linux, Chrome \
         needs chrome://flags/#enable-unsafe-webgpu enabled. Hardware acceleration must be on."
    )]
    WebGpuUnavailable,
    /// No native adapter was found.
    #[error(
        "no GPU adapter found ({reason}). Install a Vulkan driver (on Debian: `apt-get install \
         mesa-vulkan-drivers libvulkan1`, which includes the lavapipe CPU driver), or select one \
         with WGPU_BACKEND / WGPU_ADAPTER_NAME"
    )]
    NoAdapter { reason: String },
    /// The adapter refused to create a device.
    #[error("the GPU adapter '{adapter}' refused to create a device: {reason}")]
    RequestDevice { adapter: String, reason: String },
    /// A shader, pipeline, buffer or dispatch was rejected by WebGPU validation.
    #[error("GPU validation failed in {context}: {message}")]
    Validation { context: String, message: String },
    /// The GPU ran out of memory.
    #[error("the GPU ran out of memory in {context}: {message}; try a smaller model or batch")]
    OutOfMemory { context: String, message: String },
    /// Reading a buffer back to the CPU failed (usually because the device was lost).
    #[error("reading GPU results failed: {0}; the device may have been lost, reload to retry")]
    Readback(String),
    /// A kernel was called with shapes it does not support.
    #[error("{kernel}: {message}")]
    Shape {
        kernel: &'static str,
        message: String,
    },
}

impl GpuError {
    /// A [`GpuError::Shape`] for `kernel`.
    pub fn shape(kernel: &'static str, message: String) -> Self {
        Self::Shape { kernel, message }
    }
}

/// What the user sees of the adapter: enough to tell lavapipe, SwiftShader and real GPUs apart.
#[derive(Clone, Debug, Serialize)]
pub struct AdapterSummary {
    pub name: String,
    pub backend: String,
    pub driver: String,
    pub device_type: String,
}

impl AdapterSummary {
    /// Whether the adapter is a GPU emulated on the CPU (lavapipe, SwiftShader): slower than
    /// our CPU engine, and than burn on the CPU, so the `auto` choices skip it.
    pub fn is_cpu_emulation(&self) -> bool {
        self.device_type == format!("{:?}", wgpu::DeviceType::Cpu)
    }
}

/// A device, its queue and everything that lives once per device.
pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    adapter: AdapterSummary,
    pipelines: PipelineCache,
    counters: Counters,
    /// Active while [`Gpu::pooled`] records.
    pool: std::sync::Mutex<Option<DispatchPool>>,
}

/// Work sent to the device since it was created: what the benchmark and the engine's timings
/// report per decoder step.
#[derive(Default)]
struct Counters {
    dispatches: AtomicU64,
    submits: AtomicU64,
    bytes_read: AtomicU64,
}

/// A snapshot of [`Gpu::counts`]; subtract two to count the work in between.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GpuCounts {
    /// Compute dispatches recorded.
    pub dispatches: u64,
    /// Command buffers submitted.
    pub submits: u64,
    /// Bytes copied back to the CPU.
    pub bytes_read: u64,
}

impl std::ops::Sub for GpuCounts {
    type Output = GpuCounts;
    fn sub(self, earlier: GpuCounts) -> GpuCounts {
        GpuCounts {
            dispatches: self.dispatches - earlier.dispatches,
            submits: self.submits - earlier.submits,
            bytes_read: self.bytes_read - earlier.bytes_read,
        }
    }
}

impl Gpu {
    /// Opens the best adapter of this platform. Natively, `WGPU_BACKEND` and
    /// `WGPU_ADAPTER_NAME` select a backend or adapter (e.g. `WGPU_ADAPTER_NAME=llvmpipe`).
    pub async fn new() -> Result<Self, GpuError> {
        let web = cfg!(target_arch = "wasm32");
        if web && !wgpu::util::is_browser_webgpu_supported().await {
            return Err(GpuError::WebGpuUnavailable);
        }
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::PRIMARY;
        let instance = wgpu::Instance::new(desc.with_env());
        let adapter = wgpu::util::initialize_adapter_from_env_or_default(&instance, None)
            .await
            .map_err(|e| {
                if web {
                    GpuError::WebGpuUnavailable
                } else {
                    GpuError::NoAdapter {
                        reason: e.to_string(),
                    }
                }
            })?;
        Self::from_adapter(adapter).await
    }

    /// Creates the device on a given adapter, asking for the adapter's own limits so large
    /// weight buffers fit where the hardware allows.
    pub async fn from_adapter(adapter: wgpu::Adapter) -> Result<Self, GpuError> {
        let info = adapter.get_info();
        let summary = AdapterSummary {
            name: info.name.clone(),
            backend: format!("{:?}", info.backend),
            driver: format!("{} {}", info.driver, info.driver_info)
                .trim()
                .to_string(),
            device_type: format!("{:?}", info.device_type),
        };
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("webnmt"),
                required_features: wgpu::Features::empty(),
                required_limits: adapter.limits(),
                experimental_features: wgpu::ExperimentalFeatures::disabled(),
                memory_hints: wgpu::MemoryHints::Performance,
                trace: wgpu::Trace::Off,
            })
            .await
            .map_err(|e| GpuError::RequestDevice {
                adapter: summary.name.clone(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            device,
            queue,
            adapter: summary,
            pipelines: PipelineCache::default(),
            counters: Counters::default(),
            pool: std::sync::Mutex::new(None),
        })
    }

    /// The adapter this device runs on.
    pub fn adapter(&self) -> &AdapterSummary {
        &self.adapter
    }

    /// Dispatches, submits and bytes read back so far.
    pub fn counts(&self) -> GpuCounts {
        let c = &self.counters;
        GpuCounts {
            dispatches: c.dispatches.load(Ordering::Relaxed),
            submits: c.submits.load(Ordering::Relaxed),
            bytes_read: c.bytes_read.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn count_dispatch(&self) {
        self.counters.dispatches.fetch_add(1, Ordering::Relaxed);
    }

    /// The compute pipeline for `key`, compiled on first use and cached for the device's life.
    pub async fn pipeline(
        &self,
        key: &PipelineKey,
        source: &str,
    ) -> Result<Arc<wgpu::ComputePipeline>, GpuError> {
        self.pipelines.get_or_create(self, key, source).await
    }

    /// Runs `record` on a fresh command encoder, submits it once, and turns any validation or
    /// out-of-memory error raised meanwhile into a [`GpuError`] naming `context`.
    pub async fn submit(
        &self,
        context: &str,
        record: impl FnOnce(&mut wgpu::CommandEncoder),
    ) -> Result<(), GpuError> {
        self.checked(context, async {
            let mut encoder = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some(context),
                });
            record(&mut encoder);
            self.counters.submits.fetch_add(1, Ordering::Relaxed);
            self.queue.submit([encoder.finish()]);
        })
        .await
    }

    /// Runs `work` inside validation and out-of-memory error scopes.
    pub(crate) async fn checked<T>(
        &self,
        context: &str,
        work: impl Future<Output = T>,
    ) -> Result<T, GpuError> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let value = work.await;
        let validation = validation.pop().await;
        let oom = oom.pop().await;
        if let Some(e) = oom {
            return Err(GpuError::OutOfMemory {
                context: context.to_string(),
                message: e.to_string(),
            });
        }
        if let Some(e) = validation {
            return Err(GpuError::Validation {
                context: context.to_string(),
                message: e.to_string(),
            });
        }
        Ok(value)
    }

    /// Copies `buffer` (which needs `COPY_SRC` usage) back to the CPU as `f32`s.
    ///
    /// The one readback path of the crate, for both targets.
    pub async fn read_f32(&self, buffer: &wgpu::Buffer) -> Result<Vec<f32>, GpuError> {
        let bytes = self.read_bytes(buffer).await?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }

    /// Copies `buffer` back to the CPU as raw bytes.
    pub async fn read_bytes(&self, buffer: &wgpu::Buffer) -> Result<Vec<u8>, GpuError> {
        self.submit_and_read("readback", |_| {}, buffer, buffer.size())
            .await
    }

    /// Records `record` and a copy of the first `len` bytes of `buffer` into one command
    /// encoder, submits it once and returns those bytes: a decoder step's single submit and
    /// single readback. `len` must be a multiple of 4 and at most the buffer's size.
    pub async fn submit_and_read(
        &self,
        context: &str,
        record: impl FnOnce(&mut wgpu::CommandEncoder),
        buffer: &wgpu::Buffer,
        len: u64,
    ) -> Result<Vec<u8>, GpuError> {
        if len == 0 || len > buffer.size() || !len.is_multiple_of(4) {
            return Err(GpuError::Readback(format!(
                "cannot read {len} bytes of a {}-byte buffer",
                buffer.size()
            )));
        }
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size: len,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        self.submit(context, |encoder| {
            record(encoder);
            encoder.copy_buffer_to_buffer(buffer, 0, &staging, 0, len);
        })
        .await?;
        let (sender, receiver) = futures_channel::oneshot::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |result| {
            // The receiver only disappears if the caller's future was dropped.
            let _ = sender.send(result);
        });
        self.drive_mapping()?;
        receiver
            .await
            .map_err(|_| GpuError::Readback("the mapping callback never ran".into()))?
            .map_err(|e| GpuError::Readback(e.to_string()))?;
        let bytes = staging
            .get_mapped_range(..)
            .map_err(|e| GpuError::Readback(e.to_string()))?
            .to_vec();
        staging.unmap();
        self.counters.bytes_read.fetch_add(len, Ordering::Relaxed);
        Ok(bytes)
    }

    /// Natively, map callbacks run only when the device is polled; block until they have.
    #[cfg(not(target_arch = "wasm32"))]
    fn drive_mapping(&self) -> Result<(), GpuError> {
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| GpuError::Readback(e.to_string()))
    }

    /// In the browser the event loop resolves the mapping; awaiting the callback is enough.
    #[cfg(target_arch = "wasm32")]
    fn drive_mapping(&self) -> Result<(), GpuError> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::testing::gpu_or_skip;
    use super::*;

    #[test]
    fn invalid_shader_is_a_validation_error() {
        let Some(gpu) = gpu_or_skip("invalid_shader_is_a_validation_error") else {
            return;
        };
        let key = PipelineKey::new("broken");
        let err = pollster::block_on(gpu.pipeline(&key, "@compute fn main() { let x = ; }"))
            .expect_err("a syntax error must not compile");
        assert!(matches!(err, GpuError::Validation { .. }), "{err:?}");
        assert!(err.to_string().contains("compiling kernel broken"), "{err}");
        assert!(gpu.pipelines().is_empty());
    }

    #[test]
    fn readback_returns_what_was_uploaded() {
        let Some(gpu) = gpu_or_skip("readback_returns_what_was_uploaded") else {
            return;
        };
        let data: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5 - 3.0).collect();
        let buffer = gpu.storage_from("data", &data);
        assert_eq!(
            pollster::block_on(gpu.read_f32(&buffer)).expect("readback"),
            data
        );
    }

    #[test]
    fn pipeline_keys_ignore_constant_order() {
        let a = PipelineKey::new("k").with("A", 1.0).with("B", 2.0);
        let b = PipelineKey::new("k").with("B", 2.0).with("A", 1.0);
        assert_eq!(a, b);
        assert_ne!(a, PipelineKey::new("k").with("A", 1.0).with("B", 3.0));
        assert_eq!(a, a.clone().with("A", 1.0));
    }
}
