//! The other values of the wire codec that arrive from peers or disks, each on its
//! own (`pvfs_fuzz::values::TYPES`): capabilities (alone and as the list a group
//! handle or an answer carries), attributes, object details, layouts, region lists,
//! ACLs, handshake messages, the payload of a MUNGE credential, credentials,
//! attribute changes, layout requests and directory entries. The first byte picks
//! the type; the rest must decode to an error or a value that encodes back to those
//! bytes (for the records stores keep, to their current form).
#![no_main]

use libfuzzer_sys::fuzz_target;
use pvfs_fuzz::values::TYPES;

fuzz_target!(|data: &[u8]| {
    if let Some((&which, bytes)) = data.split_first() {
        (TYPES[usize::from(which) % TYPES.len()].check)(bytes);
    }
});
