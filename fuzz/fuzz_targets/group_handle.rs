//! Group handles (`openfh` of the POSIX extensions: a token naming an open file that
//! processes pass around, `crates/client/src/group.rs`): any bytes give an error or
//! a file with the handle and flags the token names, and no server is asked.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pvfs_client::Client;

fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| Client::new(pvfs_fuzz::seeds::group_config()))
}

fuzz_target!(|data: &[u8]| {
    if let Ok((file, flags)) = client().open_group_handle(data) {
        let le = |at: usize, n: usize| {
            data[at..at + n]
                .iter()
                .rev()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
        };
        assert_eq!(
            file.handle(),
            le(20, 8),
            "the file is not the one the token names"
        );
        assert_eq!(u64::from(flags), le(8, 4), "the flags are not the token's");
        assert_eq!(le(12, 8), client().config().fsid);
    }
});
