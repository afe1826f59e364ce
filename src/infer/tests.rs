//! Engine tests on the committed tiny fixture model (`tests/fixtures/tiny`), on lavapipe in CI.
