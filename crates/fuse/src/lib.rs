//! pvfs FUSE mount (work in progress in this commit series).
