use super::*;

fn tiny() -> (ModelConfig, Device, Transformer) {
    let config = ModelConfig::preset("tiny", 40, 50).expect("valid preset");
    let device = Device::flex();
    device.seed(7);
    let model = Transformer::new(&config, &device).valid();
    (config, device, model)
}

fn ids(rows: &[&[i64]], device: &Device) -> Tensor<2, Int> {
    let len = rows[0].len();
    let flat: Vec<i64> = rows.iter().flat_map(|r| r.iter().copied()).collect();
    Tensor::from_data(TensorData::new(flat, [rows.len(), len]), device)
}

fn max_diff(a: Tensor<3>, b: Tensor<3>) -> f32 {
    (a - b).abs().max().into_scalar::<f32>()
}

#[test]
fn cached_decoding_matches_full_forward() {
    let (_, device, model) = tiny();
    // Two sentences, the second padded.
    let src = ids(&[&[5, 6, 7, 8, 9], &[10, 11, 12, 0, 0]], &device);
    let tgt: [&[i64]; 2] = [&[2, 4, 5, 6, 7, 8, 9, 10], &[2, 11, 12, 13, 14, 15, 16, 17]];
    let (memory, mask) = model.encode(src);
    let (full, full_weights) = model.decode(ids(&tgt, &device), memory.clone(), &mask);
    let mut cache = model.start_decoding(memory, mask);
    let mut steps = Vec::new();
    let mut step_weights = Vec::new();
    for (&a, &b) in tgt[0].iter().zip(tgt[1]) {
        let tokens = Tensor::<1, Int>::from_data(TensorData::new(vec![a, b], [2]), &device);
        let (logits, weights) = model.decode_step(tokens, &mut cache);
        steps.push(logits.unsqueeze_dim::<3>(1));
        step_weights.push(weights.unsqueeze_dim::<4>(2));
    }
    let cached = Tensor::cat(steps, 1);
    let diff = max_diff(full, cached);
    assert!(
        diff < 1e-4,
        "cached logits differ from the full forward by {diff}"
    );
    let weights_diff = (full_weights - Tensor::cat(step_weights, 2))
        .abs()
        .max()
        .into_scalar::<f32>();
    assert!(
        weights_diff < 1e-5,
        "cross-attention weights differ by {weights_diff}"
    );
}

#[test]
fn padding_does_not_change_the_encoding() {
    let (_, device, model) = tiny();
    let (alone, _) = model.encode(ids(&[&[5, 6, 7]], &device));
    let (batched, _) = model.encode(ids(&[&[5, 6, 7, 0, 0], &[8, 9, 10, 11, 12]], &device));
    let first = batched.slice([0..1, 0..3]);
    let diff = max_diff(alone, first);
    assert!(diff < 1e-5, "padding changed the encoder output by {diff}");
}

#[test]
fn parameter_count_matches_the_config() {
    let (config, _, model) = tiny();
    assert_eq!(model.num_params(), config.n_params());
}

#[test]
fn reordering_the_cache_follows_the_rows() {
    let (_, device, model) = tiny();
    let src = ids(&[&[5, 6, 7], &[8, 9, 10]], &device);
    let (memory, mask) = model.encode(src);
    let mut cache = model.start_decoding(memory, mask);
    let first = Tensor::<1, Int>::from_data(TensorData::new(vec![2i64, 2], [2]), &device);
    model.decode_step(first, &mut cache);
    let mut swapped = cache.clone();
    Transformer::reorder_cache(
        &mut swapped,
        Tensor::from_data(TensorData::new(vec![1i64, 0], [2]), &device),
    );
    let next = Tensor::<1, Int>::from_data(TensorData::new(vec![4i64, 5], [2]), &device);
    let (a, _) = model.decode_step(next, &mut cache);
    let next_swapped = Tensor::<1, Int>::from_data(TensorData::new(vec![5i64, 4], [2]), &device);
    let (b, _) = model.decode_step(next_swapped, &mut swapped);
    let b = b.select(
        0,
        Tensor::from_data(TensorData::new(vec![1i64, 0], [2]), &device),
    );
    let diff = max_diff(a.unsqueeze_dim::<3>(0), b.unsqueeze_dim::<3>(0));
    assert!(diff < 1e-5, "reordered cache gives other logits: {diff}");
}

#[test]
fn dropout_is_active_only_in_training() {
    let config = ModelConfig::preset("tiny", 40, 50).expect("valid preset");
    let device = Device::flex().autodiff();
    device.seed(3);
    let model = Transformer::new(&config, &device);
    let src = ids(&[&[5, 6, 7]], &device);
    let tgt = ids(&[&[2, 4, 5]], &device);
    let a = model.forward(src.clone(), tgt.clone());
    let b = model.forward(src.clone(), tgt.clone());
    assert!(
        max_diff(a, b) > 1e-4,
        "dropout should make training passes differ"
    );
    let eval = model.valid();
    let device = Device::flex();
    let (src, tgt) = (ids(&[&[5, 6, 7]], &device), ids(&[&[2, 4, 5]], &device));
    let c = eval.forward(src.clone(), tgt.clone());
    let d = eval.forward(src, tgt);
    assert_eq!(max_diff(c, d), 0.0);
}

#[test]
fn a_model_from_a_bundle_trains_with_the_dropout_asked_for() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/tiny/bundle");
    let bundle = crate::weights::Bundle::from_dir(std::path::Path::new(dir)).expect("fixture");
    let device = Device::flex();
    let own = Transformer::from_bundle(&bundle, &device).expect("loads");
    assert_eq!(own.encoder.embed.dropout.prob, bundle.config().dropout);
    let asked = 0.37;
    assert_ne!(asked, bundle.config().dropout);
    let model = Transformer::from_bundle_with_dropout(&bundle, asked, &device).expect("loads");
    assert_eq!(model.encoder.embed.dropout.prob, asked);
    assert_eq!(model.decoder.embed.dropout.prob, asked);
}
