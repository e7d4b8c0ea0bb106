//! Response bodies, as a client decodes every answer: any bytes give an error or a
//! response whose encoding is exactly those bytes (or, where the bytes hold a layout
//! or directory in the older form stores still have, its current form).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pvfs_proto::Response;

fuzz_target!(|data: &[u8]| {
    if let Some(response) = pvfs_fuzz::round_trip_upgrading::<Response>(data) {
        let _ = response.op_name();
    }
});
