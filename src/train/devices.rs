//! Where training runs: device names on the command line, and data-parallel training over
//! several devices with burn's own multi-device pieces (the scheme of burn-train's
//! `MultiDevice` strategy with the optimizer on the main device): each device gets a
//! [`fork`](Module::fork) of the model and its own batch, the gradients come back with
//! [`GradientsParams::to_device`] and are summed on the main device, which clips them and runs
//! the optimizer.

use super::{TrainError, batch_loss, precision};
use crate::data::Batch;
use crate::model::Transformer;
use burn::module::Module;
use burn::optim::GradientsParams;
use burn::tensor::{Device, DeviceKind, FloatDType};

/// The device names `--device` / `--devices` accept.
pub const DEVICE_NAMES: &str = "cpu (burn flex), gpu (burn-wgpu's default adapter), \
    gpu:N (the N-th discrete GPU), igpu:N (the N-th integrated GPU), \
    wgpu-cpu (a CPU-emulated wgpu adapter such as lavapipe: slow, for tests)";

/// A training device by name: `cpu`, `gpu`, `gpu:N`, `igpu:N` or `wgpu-cpu`.
pub fn parse_device(name: &str) -> Result<Device, String> {
    let index = |rest: &str| {
        rest.parse::<usize>()
            .map_err(|_| format!("device `{name}`: `{rest}` is not a device index"))
    };
    Ok(match name.trim() {
        "cpu" => Device::flex(),
        "gpu" => Device::wgpu(DeviceKind::DefaultDevice),
        "wgpu-cpu" => Device::wgpu(DeviceKind::Cpu),
        other => match other.split_once(':') {
            Some(("gpu", n)) => Device::wgpu(DeviceKind::DiscreteGpu(index(n)?)),
            Some(("igpu", n)) => Device::wgpu(DeviceKind::IntegratedGpu(index(n)?)),
            _ => return Err(format!("unknown device `{name}`; use {DEVICE_NAMES}")),
        },
    })
}

/// A comma-separated device list; the first is the main device (optimizer, validation,
/// checkpoints). Each device may appear once.
pub fn parse_devices(list: &str) -> Result<Vec<Device>, String> {
    let names: Vec<&str> = list.split(',').map(str::trim).collect();
    let mut devices = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        if names[..i].contains(name) {
            return Err(format!("device `{name}` is listed twice in `{list}`"));
        }
        devices.push(parse_device(name)?);
    }
    Ok(devices)
}

/// What one device returns for one batch: its loss and its gradients, on the main device.
pub(super) struct BatchGrads {
    pub loss: f32,
    pub grads: GradientsParams,
}

/// How every batch of a step runs.
#[derive(Clone, Copy, Debug)]
pub(super) struct StepSettings {
    pub smoothing: f64,
    /// The loss is multiplied by this before the backward pass: the loss scale over the batches
    /// per optimizer step.
    pub loss_multiplier: f64,
    /// Forward/backward in this half precision on a cast of the f32 weights, or f32.
    pub half: Option<FloatDType>,
}

/// Forward and backward of one batch on `device` (an autodiff device).
fn one_batch(
    model: &Transformer,
    job: &Job<'_>,
    device: &Device,
    main: &Device,
    settings: StepSettings,
) -> BatchGrads {
    device.seed(job.seed);
    let loss = match settings.half {
        Some(dtype) => batch_loss(
            &precision::half_copy(model, dtype),
            job.batch,
            settings.smoothing,
            device,
        ),
        None => batch_loss(model, job.batch, settings.smoothing, device),
    };
    let value = loss.clone().into_scalar::<f32>();
    let grads =
        GradientsParams::from_grads(loss.mul_scalar(settings.loss_multiplier).backward(), model);
    BatchGrads {
        loss: value,
        grads: grads.to_device(main, model),
    }
}

/// One batch for one device, and the dropout seed it runs with.
pub(super) struct Job<'a> {
    pub batch: &'a Batch,
    pub seed: u64,
}

/// Runs `jobs[i]` on `devices[i]`, all at once (the first on this thread), and returns their
/// results in order. A device that fails (burn panics on device errors) is an error naming it.
pub(super) fn run_round(
    model: &Transformer,
    jobs: &[Job<'_>],
    devices: &[Device],
    settings: StepSettings,
) -> Result<Vec<BatchGrads>, TrainError> {
    let main = &devices[0];
    if jobs.len() == 1 {
        return Ok(vec![one_batch(model, &jobs[0], main, main, settings)]);
    }
    std::thread::scope(|scope| {
        let workers: Vec<_> = jobs
            .iter()
            .zip(devices)
            .skip(1)
            .map(|(job, device)| {
                scope.spawn(move || {
                    let fork = model.clone().fork(device);
                    one_batch(&fork, job, device, main, settings)
                })
            })
            .collect();
        let mut results = vec![one_batch(model, &jobs[0], main, main, settings)];
        for (i, worker) in workers.into_iter().enumerate() {
            let result = worker.join().map_err(|panic| {
                let message = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("unknown error");
                TrainError::Device(format!("{:?}: {message}", devices[i + 1]))
            })?;
            results.push(result);
        }
        Ok(results)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_names_parse_and_bad_ones_say_what_is_accepted() {
        assert_eq!(parse_device("cpu"), Ok(Device::flex()));
        assert_eq!(
            parse_device("gpu:1"),
            Ok(Device::wgpu(DeviceKind::DiscreteGpu(1)))
        );
        assert_eq!(
            parse_devices("cpu, wgpu-cpu"),
            Ok(vec![Device::flex(), Device::wgpu(DeviceKind::Cpu)])
        );
        let err = parse_device("tpu").expect_err("unknown");
        assert!(
            err.contains("unknown device `tpu`") && err.contains("gpu:N"),
            "{err}"
        );
        let err = parse_device("gpu:x").expect_err("bad index");
        assert!(err.contains("`x` is not a device index"), "{err}");
        let err = parse_devices("cpu,cpu").expect_err("twice");
        assert!(err.contains("listed twice"), "{err}");
    }
}
