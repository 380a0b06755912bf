#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| kiln_fuzz::server_request(data));
