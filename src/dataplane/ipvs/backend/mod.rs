//! The IPVS mode's ways to the kernel: generic netlink for virtual services and destinations
//! ([`netlink`], without `ipvsadm`), and rtnetlink for the `kube-ipvs0` dummy link and the
//! service addresses bound to it ([`link`], without `ip`).

pub mod link;
pub mod netlink;
