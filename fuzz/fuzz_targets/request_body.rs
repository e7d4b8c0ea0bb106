//! Request bodies, as a server decodes every request frame: any bytes give an error
//! or a request whose encoding is exactly those bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pvfs_proto::RequestBody;

fuzz_target!(|data: &[u8]| {
    if let Some(body) = pvfs_fuzz::round_trip::<RequestBody>(data) {
        // What the server's dispatch asks of every request first.
        let _ = (
            body.request.op_name(),
            body.request.effect(),
            body.request.flow(),
        );
    }
});
