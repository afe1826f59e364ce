//! Mixed-precision training: the weights, gradients and Adam state stay in f32; each batch runs
//! its forward and backward pass on a half-precision copy of the weights (a cast inside the
//! autodiff graph, so the gradients arrive in f32 on the f32 weights). Softmax, LayerNorm and
//! the loss are computed in f32. With f16 the loss is scaled dynamically so small gradients do
//! not underflow: a step whose gradients overflow is skipped and halves the scale, and every
//! [`GROWTH_INTERVAL`] good steps double it (torch's `GradScaler` defaults).

use super::TrainError;
use crate::model::Transformer;
use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::{DType, Device, FloatDType, Tensor};
use serde::{Deserialize, Serialize};

/// `precision` in `[training]` / `--precision`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// f16 mixed precision where every device is a GPU backend that supports f16, else f32
    /// (so always f32 on the CPU).
    #[default]
    Auto,
    /// Everything in f32.
    F32,
    /// f16 forward and backward with f32 weights and dynamic loss scaling.
    F16,
    /// bf16 forward and backward with f32 weights (no loss scaling needed).
    Bf16,
}

impl std::str::FromStr for Precision {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Self::Auto),
            "f32" => Ok(Self::F32),
            "f16" => Ok(Self::F16),
            "bf16" => Ok(Self::Bf16),
            other => Err(format!(
                "unknown precision `{other}`; use auto, f32, f16 or bf16"
            )),
        }
    }
}

/// The loss scale f16 starts with.
pub const INITIAL_LOSS_SCALE: f64 = 65536.0;
/// Good steps after which the f16 loss scale doubles.
pub const GROWTH_INTERVAL: usize = 2000;

impl Precision {
    /// The half-precision type the forward pass runs in on `devices`, or `None` for f32.
    pub fn resolve(self, devices: &[Device]) -> Result<Option<FloatDType>, TrainError> {
        let supported = |dtype: DType| devices.iter().all(|d| d.supports_dtype(dtype));
        let on_cpu = devices
            .iter()
            .any(|d| d.clone().without_autodiff() == Device::flex());
        match self {
            Self::F32 => Ok(None),
            Self::Auto if on_cpu || !supported(DType::F16) => Ok(None),
            Self::Auto | Self::F16 => Self::check(supported(DType::F16), FloatDType::F16, "f16"),
            Self::Bf16 => Self::check(supported(DType::BF16), FloatDType::BF16, "bf16"),
        }
    }

    fn check(
        supported: bool,
        dtype: FloatDType,
        name: &str,
    ) -> Result<Option<FloatDType>, TrainError> {
        if supported {
            Ok(Some(dtype))
        } else {
            Err(TrainError::Options(format!(
                "precision {name}: a training device has no {name} support in burn; \
                 use --precision f32 (or f16 / bf16, whichever the device has)"
            )))
        }
    }
}

struct CastParams(FloatDType);

impl ModuleMapper for CastParams {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let dtype = self.0;
        param.map(|t| t.cast(dtype))
    }
}

/// The model with every weight cast to `dtype`, same parameter ids; on an autodiff device the
/// casts are part of the graph, so gradients flow back to `model`'s f32 weights.
pub fn half_copy(model: &Transformer, dtype: FloatDType) -> Transformer {
    model.clone().map(&mut CastParams(dtype))
}

/// Dynamic loss scale for f16 (a constant 1 otherwise).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LossScale {
    pub scale: f64,
    /// Good steps since the scale last changed.
    pub good_steps: usize,
}

impl LossScale {
    pub fn new(dtype: Option<FloatDType>) -> Self {
        let scale = if dtype == Some(FloatDType::F16) {
            INITIAL_LOSS_SCALE
        } else {
            1.0
        };
        Self {
            scale,
            good_steps: 0,
        }
    }

    /// Records a step whose gradient norm (of the unscaled gradients) was `norm`; returns
    /// whether the step may be applied. Only a dynamic (f16) scale ever skips.
    pub fn update(&mut self, norm: f64, dynamic: bool) -> bool {
        if !dynamic {
            return true;
        }
        if !norm.is_finite() {
            self.scale = (self.scale / 2.0).max(1.0);
            self.good_steps = 0;
            return false;
        }
        self.good_steps += 1;
        if self.good_steps >= GROWTH_INTERVAL {
            self.scale *= 2.0;
            self.good_steps = 0;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ModelConfig;
    use crate::train::{clip, loss};
    use burn::module::ModuleVisitor;
    use burn::optim::GradientsParams;
    use burn::tensor::{Int, TensorData};

    /// Σ‖a − b‖² and Σ‖b‖² over the parameters, and whether every gradient is f32.
    struct Compare<'a> {
        a: &'a GradientsParams,
        b: &'a GradientsParams,
        diff: f64,
        norm: f64,
        all_f32: bool,
    }

    impl ModuleVisitor for Compare<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let (Some(a), Some(b)) = (self.a.get::<D>(param.id), self.b.get::<D>(param.id)) else {
                self.all_f32 = false;
                return;
            };
            self.all_f32 &= a.dtype() == DType::F32 && b.dtype() == DType::F32;
            let sq = |t: Tensor<D>| f64::from(t.square().sum().into_scalar::<f32>());
            self.diff += sq(a - b.clone());
            self.norm += sq(b);
        }
    }

    struct Dtypes(Vec<DType>);

    impl ModuleVisitor for Dtypes {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            self.0.push(param.val().dtype());
        }
    }

    #[test]
    fn f16_gradients_arrive_in_f32_on_the_f32_weights_and_match_f32_gradients() {
        let mut config = ModelConfig::preset("tiny", 40, 50).expect("preset");
        config.dropout = 0.0;
        let device = Device::flex().autodiff();
        device.seed(3);
        let model = Transformer::new(&config, &device);
        let ids = |v: Vec<i64>, len: usize| {
            Tensor::<2, Int>::from_data(TensorData::new(v, [2, len]), &device)
        };
        let src = ids(vec![5, 6, 7, 8, 9, 10, 11, 12, 0, 0], 5);
        let tgt_in = ids(vec![2, 4, 5, 6, 7, 2, 11, 12, 13, 0], 5);
        let tgt_out = ids(vec![4, 5, 6, 7, 3, 11, 12, 13, 3, 0], 5);
        let grads = |m: &Transformer, multiplier: f64| {
            let logits = m.forward(src.clone(), tgt_in.clone());
            let l = loss::label_smoothed_cross_entropy(logits, tgt_out.clone(), 0.1);
            GradientsParams::from_grads(l.mul_scalar(multiplier).backward(), &model)
        };
        let full = grads(&model, 1.0);
        let half = half_copy(&model, FloatDType::F16);
        let mut dtypes = Dtypes(Vec::new());
        half.visit(&mut dtypes);
        assert!(dtypes.0.iter().all(|&d| d == DType::F16), "{:?}", dtypes.0);
        let mut mixed = grads(&half, INITIAL_LOSS_SCALE);
        let norm = clip::unscale_and_clip(&model, &mut mixed, INITIAL_LOSS_SCALE, 0.0);
        let mut cmp = Compare {
            a: &mixed,
            b: &full,
            diff: 0.0,
            norm: 0.0,
            all_f32: true,
        };
        model.visit(&mut cmp);
        assert!(cmp.all_f32, "a gradient is missing or not f32");
        let relative = (cmp.diff / cmp.norm).sqrt();
        assert!(
            relative < 1e-2,
            "f16 gradients differ from f32 by {relative} (norm {norm} vs {})",
            cmp.norm.sqrt()
        );
        assert!((norm - cmp.norm.sqrt()).abs() < 1e-2 * norm, "{norm}");
    }

    #[test]
    fn the_f16_loss_scale_halves_on_overflow_and_doubles_after_good_steps() {
        let mut s = LossScale::new(Some(FloatDType::F16));
        assert_eq!(s.scale, INITIAL_LOSS_SCALE);
        assert!(!s.update(f64::INFINITY, true));
        assert_eq!(s.scale, INITIAL_LOSS_SCALE / 2.0);
        for _ in 0..GROWTH_INTERVAL - 1 {
            assert!(s.update(1.0, true));
        }
        assert_eq!(s.scale, INITIAL_LOSS_SCALE / 2.0);
        assert!(s.update(1.0, true));
        assert_eq!((s.scale, s.good_steps), (INITIAL_LOSS_SCALE, 0));
        let mut plain = LossScale::new(None);
        assert!(plain.update(f64::NAN, false));
        assert_eq!(plain.scale, 1.0);
    }

    #[test]
    fn precision_resolves_to_f32_on_the_cpu_and_parses_its_names() {
        let cpu = [Device::flex().autodiff()];
        assert_eq!(Precision::Auto.resolve(&cpu).ok(), Some(None));
        assert_eq!(Precision::F32.resolve(&cpu).ok(), Some(None));
        assert_eq!("bf16".parse(), Ok(Precision::Bf16));
        let err = "f8".parse::<Precision>().expect_err("unknown");
        assert!(err.contains("auto, f32, f16 or bf16"), "{err}");
    }
}
