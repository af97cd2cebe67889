pub mod etcd;
