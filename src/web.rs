//! The wasm side of the page: opens WebGPU, runs the kernel self-check and shows the result.
//!
//! Text goes into the page with `set_text_content` only, never as HTML.

use crate::gpu::{Gpu, GpuError};
use crate::selfcheck::{self, SelfCheckReport};
use wasm_bindgen::prelude::*;
use web_sys::{Document, Element};

/// The seed of the page's self-check inputs (any value works; fixed so runs are comparable).
const SELFCHECK_SEED: u64 = 2024;

/// Runs when the wasm module loads.
#[wasm_bindgen(start)]
pub fn start() {
    std::panic::set_hook(Box::new(|info| {
        web_sys::console::error_1(&JsValue::from_str(&info.to_string()));
        if let Some(document) = document() {
            show_status(&document, "error", &format!("Internal error: {info}"));
        }
    }));
    wasm_bindgen_futures::spawn_local(async {
        let Some(document) = document() else {
            return;
        };
        match run_selfcheck().await {
            Ok(report) => show_report(&document, &report),
            Err(GpuError::WebGpuUnavailable) => show_status(
                &document,
                "no-webgpu",
                &GpuError::WebGpuUnavailable.to_string(),
            ),
            Err(e) => show_status(&document, "error", &format!("The GPU check failed: {e}")),
        }
    });
}

/// Opens the GPU and runs every kernel check; for scripts that want the raw report.
#[wasm_bindgen(js_name = selfCheck)]
pub async fn self_check() -> Result<JsValue, JsError> {
    let report = run_selfcheck().await?;
    Ok(serde_wasm_bindgen::to_value(&report)?)
}

async fn run_selfcheck() -> Result<SelfCheckReport, GpuError> {
    let gpu = Gpu::new().await?;
    selfcheck::run(&gpu, SELFCHECK_SEED).await
}

fn document() -> Option<Document> {
    web_sys::window()?.document()
}

/// Sets the status line's text and its `data-state` (`running`, `pass`, `fail`, `no-webgpu`, `error`).
fn show_status(document: &Document, state: &str, text: &str) {
    if let Some(status) = document.get_element_by_id("selfcheck-status") {
        status.set_text_content(Some(text));
        // Setting a plain data attribute cannot fail on a live element.
        let _ = status.set_attribute("data-state", state);
    }
}

fn show_report(document: &Document, report: &SelfCheckReport) {
    let a = &report.adapter;
    if let Some(adapter) = document.get_element_by_id("adapter") {
        // Browsers may withhold the adapter's description (SwiftShader gives none).
        let name = if a.name.is_empty() {
            "name not reported by the browser"
        } else {
            &a.name
        };
        adapter.set_text_content(Some(&format!(
            "Adapter: {name} ({}, {})",
            a.backend, a.device_type
        )));
    }
    if let Some(body) = document.get_element_by_id("selfcheck-rows") {
        for check in &report.checks {
            let c = &check.comparison;
            let verdict = if c.passed() { "match" } else { "MISMATCH" };
            let cells = [
                check.kernel.to_string(),
                check.shape.clone(),
                format!("{:.2e}", c.max_abs_err),
                format!("{} / {}", c.n_bad, c.len),
                verdict.to_string(),
            ];
            if let Some(row) = row(document, &cells) {
                let _ = body.append_child(&row);
            }
        }
    }
    let n = report.checks.len();
    if report.passed {
        show_status(
            document,
            "pass",
            &format!("All {n} kernel checks match the reference (atol 1e-4, rtol 1e-4)."),
        );
    } else {
        let bad = report
            .checks
            .iter()
            .filter(|c| !c.comparison.passed())
            .count();
        show_status(
            document,
            "fail",
            &format!("{bad} of {n} kernel checks do not match the reference on this adapter."),
        );
    }
}

fn row(document: &Document, cells: &[String]) -> Option<Element> {
    let tr = document.create_element("tr").ok()?;
    for text in cells {
        let td = document.create_element("td").ok()?;
        td.set_text_content(Some(text));
        tr.append_child(&td).ok()?;
    }
    Some(tr)
}
