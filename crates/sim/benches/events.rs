//! Simulated events per second: a toy tree (N = 100 gateways, F = 10, H = 2, hold-and-release)
//! under the AWS model.
fn main() {}
