//! libpvfs_preload.so (work in progress in this commit series).
