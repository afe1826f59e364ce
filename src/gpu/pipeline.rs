//! The compute-pipeline cache: each (kernel, override constants) pair is compiled once per device.

use super::{Gpu, GpuError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Identifies one compiled pipeline: the kernel's name and its WGSL `override` constants.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PipelineKey {
    kernel: &'static str,
    /// `(name, f64 bits)`, sorted by name so equal sets give equal keys.
    constants: Vec<(&'static str, u64)>,
}

impl PipelineKey {
    /// A kernel without override constants.
    pub fn new(kernel: &'static str) -> Self {
        Self {
            kernel,
            constants: Vec::new(),
        }
    }

    /// Sets the WGSL `override` constant `name` to `value`.
    pub fn with(mut self, name: &'static str, value: f64) -> Self {
        self.constants.retain(|(n, _)| *n != name);
        self.constants.push((name, value.to_bits()));
        self.constants.sort_unstable_by_key(|(n, _)| *n);
        self
    }
}

/// Compiled pipelines of one device. Shared by reference; safe to use from async code because
/// the lock is never held across an `await`.
#[derive(Default)]
pub struct PipelineCache {
    pipelines: Mutex<HashMap<PipelineKey, Arc<wgpu::ComputePipeline>>>,
}

impl PipelineCache {
    /// Number of pipelines compiled so far.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True before the first pipeline is compiled.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PipelineKey, Arc<wgpu::ComputePipeline>>> {
        // A panic elsewhere cannot leave the map half-updated: insertions are single calls.
        self.pipelines
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) async fn get_or_create(
        &self,
        gpu: &Gpu,
        key: &PipelineKey,
        source: &str,
    ) -> Result<Arc<wgpu::ComputePipeline>, GpuError> {
        if let Some(pipeline) = self.lock().get(key) {
            return Ok(pipeline.clone());
        }
        let constants: Vec<(&str, f64)> = key
            .constants
            .iter()
            .map(|&(name, bits)| (name, f64::from_bits(bits)))
            .collect();
        let context = format!("compiling kernel {}", key.kernel);
        let pipeline = gpu
            .checked(&context, async {
                let module = gpu
                    .device
                    .create_shader_module(wgpu::ShaderModuleDescriptor {
                        label: Some(key.kernel),
                        source: wgpu::ShaderSource::Wgsl(source.into()),
                    });
                gpu.device
                    .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                        label: Some(key.kernel),
                        layout: None,
                        module: &module,
                        entry_point: Some("main"),
                        compilation_options: wgpu::PipelineCompilationOptions {
                            constants: &constants,
                            zero_initialize_workgroup_memory: true,
                        },
                        cache: None,
                    })
            })
            .await?;
        let pipeline = Arc::new(pipeline);
        self.lock().insert(key.clone(), pipeline.clone());
        Ok(pipeline)
    }
}

impl Gpu {
    /// The device's pipeline cache (for statistics and tests).
    pub fn pipelines(&self) -> &PipelineCache {
        &self.pipelines
    }
}
