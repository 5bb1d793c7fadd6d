//! The Docker inspect answer: any bytes as an engine's `GET /containers/{id}/json` body.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = netpath::docker::addressing_from_json(data);
});
