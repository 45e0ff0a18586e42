pub mod placeholder {}
pub mod kernels;
