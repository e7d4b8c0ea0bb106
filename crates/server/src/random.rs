//! Random ids a server picks (change-feed epochs, lease ids, the client id of its
//! own calls): `pvfs_proto::clock::random_u64`, which a simulation seeds.

/// A random 64-bit id.
pub fn random_u64() -> u64 {
    pvfs_proto::clock::random_u64()
}
