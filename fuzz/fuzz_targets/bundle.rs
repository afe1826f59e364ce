//! The bundle loader on hostile files. The first byte picks which file the rest of the input
//! replaces in the committed tiny bundle: 0 model.safetensors, 1 manifest.json, 2 the source
//! tokenizer. The manifest's sizes and sha256 are recomputed for a replaced data file, so the
//! input reaches the safetensors header, dtype/shape and tokenizer checks instead of stopping at
//! the integrity check. Loading must return `Ok` or a `BundleError`, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};
use webnmt::weights::Bundle;

const TINY: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/tiny/bundle");

fn file(name: &str) -> Vec<u8> {
    std::fs::read(format!("{TINY}/{name}")).expect("the committed tiny bundle")
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut files = [
        ("model.safetensors", file("model.safetensors")),
        ("source.tokenizer.json", file("source.tokenizer.json")),
        ("target.tokenizer.json", file("target.tokenizer.json")),
    ];
    let mut manifest = file("manifest.json");
    match mode % 3 {
        0 => files[0].1 = rest.to_vec(),
        1 => manifest = rest.to_vec(),
        _ => files[1].1 = rest.to_vec(),
    }
    if mode % 3 != 1 {
        // Keep the manifest consistent with the replaced file.
        let Ok(mut json) = serde_json::from_slice::<serde_json::Value>(&manifest) else {
            return;
        };
        for (name, bytes) in &files {
            let digest = Sha256::digest(bytes);
            let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
            json["files"][*name]["sha256"] = hex.into();
            json["files"][*name]["bytes"] = bytes.len().into();
        }
        manifest = serde_json::to_vec(&json).expect("serializable");
    }
    let _ = Bundle::from_files(&manifest, |name| {
        files
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, b)| b.clone())
            .ok_or_else(|| "not in the bundle".to_string())
    });
});
