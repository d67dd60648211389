//! The kernel as the IPVS applier reaches it: the [`Backend`] seam (tests put a fault-injecting
//! one behind it) and [`KernelBackend`], the real one (IPVS over generic netlink, the dummy
//! link over rtnetlink), with the errors both give.

use super::super::backend::link::{self, AddressChanges, Link, LinkAddresses};
use super::super::backend::netlink::{
    self as ipvs, ListedDestination, ListedService, Request, ServiceKey,
};
use super::super::names;
use crate::nft;

/// Why the backend could not do what it was asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Ipvs(#[from] ipvs::Error),
    #[error(transparent)]
    Link(#[from] link::Error),
    #[error("helper rules: {0}")]
    Rules(#[from] nft::apply::Error),
}

/// The kernel as this mode reaches it.
pub trait Backend: Send {
    /// The dummy link, created (down) when missing.
    fn ensure_link(&mut self) -> Result<Link, Error>;
    /// The link's addresses and every other interface's.
    fn addresses(&mut self, link: &Link) -> Result<LinkAddresses, Error>;
    /// Binds and unbinds service addresses on the link.
    fn update_addresses(&mut self, link: &Link, changes: &AddressChanges) -> Result<(), Error>;
    /// Every virtual service of the network namespace.
    fn services(&mut self) -> Result<Vec<ListedService>, Error>;
    /// One virtual service's destinations, with their connection counts.
    fn destinations(&mut self, key: &ServiceKey) -> Result<Vec<ListedDestination>, Error>;
    /// One request that changes a virtual service or destination.
    fn send(&mut self, request: &Request) -> Result<(), Error>;
    /// `requests` in order, calling `accepted` with the index of each the kernel took; the
    /// first refusal is returned (a backend may send many per datagram, and requests after a
    /// refused one may have been taken too: each is reported).
    fn send_all(
        &mut self,
        requests: &[Request],
        accepted: &mut dyn FnMut(usize),
    ) -> Result<(), Error> {
        for (i, r) in requests.iter().enumerate() {
            self.send(r)?;
            accepted(i);
        }
        Ok(())
    }

    /// Netlink messages sent so far (a running total), for the sync's count; 0 if not counted.
    fn messages_sent(&self) -> u64 {
        0
    }
}

/// The real backend: IPVS over generic netlink, the link over rtnetlink, in the caller's
/// network namespace or a named one. The IPVS socket opens on first use, so a kernel without
/// `ip_vs` fails the sync with the reason rather than the constructor.
pub struct KernelBackend {
    netns: Option<String>,
    ipvs: Option<ipvs::Client>,
    link: Option<link::Client>,
    /// Netlink messages of the clients dropped after a socket error.
    sent_before: u64,
}

impl KernelBackend {
    pub fn new(netns: Option<&str>) -> KernelBackend {
        KernelBackend {
            netns: netns.map(str::to_owned),
            ipvs: None,
            link: None,
            sent_before: 0,
        }
    }

    fn ipvs(&mut self) -> Result<&mut ipvs::Client, Error> {
        if self.ipvs.is_none() {
            self.ipvs = Some(ipvs::Client::open(self.netns.as_deref())?);
        }
        Ok(self.ipvs.as_mut().expect("opened above"))
    }

    fn link(&mut self) -> Result<&mut link::Client, Error> {
        if self.link.is_none() {
            self.link = Some(link::Client::open(self.netns.as_deref())?);
        }
        Ok(self.link.as_mut().expect("opened above"))
    }

    /// Runs `f` on the IPVS client; a socket or framing error forgets the socket, so the next
    /// call opens a fresh one (a refusal keeps it: the socket is fine).
    fn on_ipvs<T>(
        &mut self,
        f: impl FnOnce(&mut ipvs::Client) -> Result<T, ipvs::Error>,
    ) -> Result<T, Error> {
        let result = f(self.ipvs()?);
        if matches!(
            result,
            Err(ipvs::Error::Socket(_) | ipvs::Error::Framing(_))
        ) {
            self.sent_before += self.ipvs.take().map_or(0, |c| c.messages_sent());
        }
        Ok(result?)
    }

    /// The same for the link client.
    fn on_link<T>(
        &mut self,
        f: impl FnOnce(&mut link::Client) -> Result<T, link::Error>,
    ) -> Result<T, Error> {
        let result = f(self.link()?);
        if matches!(
            result,
            Err(link::Error::Socket(_) | link::Error::Framing(_))
        ) {
            self.sent_before += self.link.take().map_or(0, |c| c.messages_sent());
        }
        Ok(result?)
    }
}

impl Backend for KernelBackend {
    fn ensure_link(&mut self) -> Result<Link, Error> {
        self.on_link(|c| c.ensure_dummy(names::LINK))
    }

    fn addresses(&mut self, link: &Link) -> Result<LinkAddresses, Error> {
        self.on_link(|c| c.addresses(link))
    }

    fn update_addresses(&mut self, link: &Link, changes: &AddressChanges) -> Result<(), Error> {
        self.on_link(|c| c.update(link, changes).map(drop))
    }

    fn services(&mut self) -> Result<Vec<ListedService>, Error> {
        self.on_ipvs(|c| c.services())
    }

    fn destinations(&mut self, key: &ServiceKey) -> Result<Vec<ListedDestination>, Error> {
        self.on_ipvs(|c| c.destinations(key))
    }

    fn send(&mut self, request: &Request) -> Result<(), Error> {
        self.on_ipvs(|c| c.send(request))
    }

    fn send_all(
        &mut self,
        requests: &[Request],
        accepted: &mut dyn FnMut(usize),
    ) -> Result<(), Error> {
        self.on_ipvs(|c| c.send_all(requests, accepted))
    }

    fn messages_sent(&self) -> u64 {
        let ipvs = self.ipvs.as_ref().map_or(0, ipvs::Client::messages_sent);
        self.sent_before + ipvs + self.link.as_ref().map_or(0, link::Client::messages_sent)
    }
}
