//! Buffer and bind-group helpers. Storage buffers are created with `COPY_SRC | COPY_DST` so any
//! of them can be read back or overwritten.

use super::Gpu;
use wgpu::util::DeviceExt;

const STORAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

impl Gpu {
    /// A storage buffer holding `data`.
    pub fn storage_from<T: bytemuck::NoUninit>(&self, label: &str, data: &[T]) -> wgpu::Buffer {
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytemuck::cast_slice(data),
                usage: STORAGE,
            })
    }

    /// A zero-filled storage buffer of `len` elements of 4 bytes (`f32`, `u32`).
    pub fn storage_zeroed(&self, label: &str, len: usize) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: (len * 4) as u64,
            usage: STORAGE,
            mapped_at_creation: false,
        })
    }

    /// A uniform buffer holding one `#[repr(C)]` parameter struct.
    pub fn uniform<T: bytemuck::NoUninit>(&self, label: &str, params: &T) -> wgpu::Buffer {
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytemuck::bytes_of(params),
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            })
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
        let bind_group = self.bind_group(pipeline, buffers);
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(label),
            timestamp_writes: None,
        });
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
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
