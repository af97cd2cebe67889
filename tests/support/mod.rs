//! Shared harnesses of the integration tests.
#![allow(dead_code)] // each test file uses a part of it

pub mod certs;
pub mod etcd;
pub mod hosts;
pub mod tools;
