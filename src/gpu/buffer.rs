//! Buffer and bind-group helpers. Storage buffers are created with `COPY_SRC | COPY_DST` so any
//! of them can be read back or overwritten.

use super::Gpu;
use std::collections::HashMap;

/// Uniform buffers and bind groups reused by work recorded again and again with the same
/// sequence of dispatches (the decoder steps of one sentence). Inside [`Gpu::pooled`], the n-th
/// [`Gpu::uniform`] call returns the pool's n-th uniform buffer, rewritten with
/// `queue.write_buffer` (applied before the next submit), and [`Gpu::dispatch`] reuses the bind
/// group of the same pipeline and buffers: after the first steps nothing is allocated per step.
#[derive(Default)]
pub struct DispatchPool {
    uniforms: Vec<wgpu::Buffer>,
    next: usize,
    bind_groups: HashMap<(wgpu::ComputePipeline, Vec<wgpu::Buffer>), wgpu::BindGroup>,
}

impl DispatchPool {
    /// Bind groups held (for tests).
    pub fn bind_groups(&self) -> usize {
        self.bind_groups.len()
    }

    /// Uniform buffers held (for tests).
    pub fn uniforms(&self) -> usize {
        self.uniforms.len()
    }
}

const STORAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

impl Gpu {
    /// A storage buffer holding `data`.
    pub fn storage_from<T: bytemuck::NoUninit>(&self, label: &str, data: &[T]) -> wgpu::Buffer {
        self.buffer_with(label, bytemuck::cast_slice(data), STORAGE)
    }

    /// A buffer holding `bytes`, written through the queue rather than mapped at creation:
    /// mapping panics inside wgpu when the device is lost, a queue write reports an error.
    fn buffer_with(&self, label: &str, bytes: &[u8], usage: wgpu::BufferUsages) -> wgpu::Buffer {
        let size = (bytes.len() as u64).next_multiple_of(4).max(4);
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage: usage | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        if bytes.len().is_multiple_of(4) {
            self.queue.write_buffer(&buffer, 0, bytes);
        } else {
            let mut padded = bytes.to_vec();
            padded.resize(size as usize, 0);
            self.queue.write_buffer(&buffer, 0, &padded);
        }
        buffer
    }

    /// A zero-filled storage buffer of `len` elements of 4 bytes (`f32`, `u32`).
    pub fn storage_zeroed(&self, label: &str, len: usize) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            // In u64: on wasm32 a usize product of 4 × len could wrap to a small buffer.
            size: len as u64 * 4,
            usage: STORAGE,
            mapped_at_creation: false,
        })
    }

    /// A uniform buffer holding one `#[repr(C)]` parameter struct.
    pub fn uniform<T: bytemuck::NoUninit>(&self, label: &str, params: &T) -> wgpu::Buffer {
        let bytes = bytemuck::bytes_of(params);
        if let Some(pool) = self.pool_lock().as_mut() {
            let slot = pool.next;
            pool.next += 1;
            match pool.uniforms.get(slot) {
                Some(buffer) if buffer.size() == bytes.len() as u64 => {
                    self.queue.write_buffer(buffer, 0, bytes);
                    return buffer.clone();
                }
                _ => {
                    let buffer = self.create_uniform(label, params);
                    if slot < pool.uniforms.len() {
                        pool.uniforms[slot] = buffer.clone();
                    } else {
                        pool.uniforms.push(buffer.clone());
                    }
                    return buffer;
                }
            }
        }
        self.create_uniform(label, params)
    }

    fn create_uniform<T: bytemuck::NoUninit>(&self, label: &str, params: &T) -> wgpu::Buffer {
        self.buffer_with(
            label,
            bytemuck::bytes_of(params),
            wgpu::BufferUsages::UNIFORM,
        )
    }

    /// Records one compute pass of `pipeline` over `groups` workgroups, with `buffers` bound to
    /// group 0 as in [`Gpu::bind_group`].
    pub fn dispatch(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        label: &str,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[&wgpu::Buffer],
        groups: [u32; 3],
    ) {
        self.count_dispatch();
        let bind_group = match self.pool_lock().as_mut() {
            Some(pool) => {
                let key = (
                    pipeline.clone(),
                    buffers.iter().map(|&b| b.clone()).collect::<Vec<_>>(),
                );
                pool.bind_groups
                    .entry(key)
                    .or_insert_with(|| self.bind_group(pipeline, buffers))
                    .clone()
            }
            None => self.bind_group(pipeline, buffers),
        };
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(label),
            timestamp_writes: None,
        });
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
    }

    /// Runs `record` with `pool` serving uniforms and bind groups (see [`DispatchPool`]).
    pub fn pooled<R>(&self, pool: &mut DispatchPool, record: impl FnOnce() -> R) -> R {
        pool.next = 0;
        *self.pool_lock() = Some(std::mem::take(pool));
        let result = record();
        if let Some(back) = self.pool_lock().take() {
            *pool = back;
        }
        result
    }

    fn pool_lock(&self) -> std::sync::MutexGuard<'_, Option<DispatchPool>> {
        // A panic while recording leaves nothing half-updated that matters: recover the pool.
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A bind group for group 0 of `pipeline` with `buffers` at bindings 0, 1, 2, … in order
    /// (by convention: the uniform params first, then the inputs, the output last).
    pub fn bind_group(
        &self,
        pipeline: &wgpu::ComputePipeline,
        buffers: &[&wgpu::Buffer],
    ) -> wgpu::BindGroup {
        let entries: Vec<wgpu::BindGroupEntry> = buffers
            .iter()
            .enumerate()
            .map(|(i, buffer)| wgpu::BindGroupEntry {
                binding: i as u32,
                resource: buffer.as_entire_binding(),
            })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        })
    }
}
