//! The IPVS mode's ways to the kernel. One so far: generic netlink ([`netlink`]), which
//! programs and lists virtual services and destinations without `ipvsadm`.

pub mod netlink;
