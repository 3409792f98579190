//! A behaviour whose per-connection handler lives behind one pointer.
//!
//! Why: libp2p runs every connection as a task whose future holds the behaviour's connection handler by
//! value, in more than one of its states. A VN's handler (the eight behaviours of [`super::behaviour`]) is
//! 4.3 KB, 3.4 KB of it identify's queue of pending events, and each connection's task came to about 16 KB
//! per end: 28 % of the heap of 128 VNs in one process (heaptrack, `testnet --nodes 16 --vns 8 --degree 8
//! --transport memory`), where every pair of VNs that ever spoke keeps a connection. Boxed, the handler is
//! allocated once per connection and the task holds a pointer. Nothing else changes: every call is
//! forwarded, and the wrapper dereferences to the behaviour it holds.

use std::ops::{Deref, DerefMut};
use std::task::{Context, Poll};

use libp2p::PeerId;
use libp2p::core::transport::PortUse;
use libp2p::core::{Endpoint, Multiaddr};
use libp2p::swarm::handler::ConnectionEvent;
use libp2p::swarm::{
    ConnectionDenied, ConnectionHandler, ConnectionHandlerEvent, ConnectionId, FromSwarm,
    NetworkBehaviour, SubstreamProtocol, THandler, THandlerInEvent, THandlerOutEvent, ToSwarm,
};

/// `B`, with each connection's handler boxed.
pub struct BoxedHandlers<B>(pub B);

impl<B> Deref for BoxedHandlers<B> {
    type Target = B;
    fn deref(&self) -> &B {
        &self.0
    }
}

impl<B> DerefMut for BoxedHandlers<B> {
    fn deref_mut(&mut self) -> &mut B {
        &mut self.0
    }
}

impl<B: NetworkBehaviour> NetworkBehaviour for BoxedHandlers<B> {
    type ConnectionHandler = BoxedHandler<THandler<B>>;
    type ToSwarm = B::ToSwarm;

    fn handle_pending_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        local_addr: &Multiaddr,
        remote_addr: &Multiaddr,
    ) -> Result<(), ConnectionDenied> {
        self.0
            .handle_pending_inbound_connection(connection_id, local_addr, remote_addr)
    }

    fn handle_established_inbound_connection(
        &mut self,
        connection_id: ConnectionId,
        peer: PeerId,
        local_addr: &Multiaddr,
        remote_addr: &Multiaddr,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        self.0
            .handle_established_inbound_connection(connection_id, peer, local_addr, remote_addr)
            .map(|h| BoxedHandler(Box::new(h)))
    }

    fn handle_pending_outbound_connection(
        &mut self,
        connection_id: ConnectionId,
        maybe_peer: Option<PeerId>,
        addresses: &[Multiaddr],
        effective_role: Endpoint,
    ) -> Result<Vec<Multiaddr>, ConnectionDenied> {
        self.0.handle_pending_outbound_connection(
            connection_id,
            maybe_peer,
            addresses,
            effective_role,
        )
    }

    fn handle_established_outbound_connection(
        &mut self,
        connection_id: ConnectionId,
        peer: PeerId,
        addr: &Multiaddr,
        role_override: Endpoint,
        port_use: PortUse,
    ) -> Result<THandler<Self>, ConnectionDenied> {
        self.0
            .handle_established_outbound_connection(
                connection_id,
                peer,
                addr,
                role_override,
                port_use,
            )
            .map(|h| BoxedHandler(Box::new(h)))
    }

    fn on_swarm_event(&mut self, event: FromSwarm<'_>) {
        self.0.on_swarm_event(event)
    }

    fn on_connection_handler_event(
        &mut self,
        peer_id: PeerId,
        connection_id: ConnectionId,
        event: THandlerOutEvent<Self>,
    ) {
        self.0
            .on_connection_handler_event(peer_id, connection_id, event)
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<ToSwarm<Self::ToSwarm, THandlerInEvent<Self>>> {
        self.0.poll(cx)
    }
}

/// A connection handler on the heap; every call goes to it.
pub struct BoxedHandler<H>(Box<H>);

impl<H: ConnectionHandler> ConnectionHandler for BoxedHandler<H> {
    type FromBehaviour = H::FromBehaviour;
    type ToBehaviour = H::ToBehaviour;
    type InboundProtocol = H::InboundProtocol;
    type OutboundProtocol = H::OutboundProtocol;
    type InboundOpenInfo = H::InboundOpenInfo;
    type OutboundOpenInfo = H::OutboundOpenInfo;

    fn listen_protocol(&self) -> SubstreamProtocol<Self::InboundProtocol, Self::InboundOpenInfo> {
        self.0.listen_protocol()
    }

    fn connection_keep_alive(&self) -> bool {
        self.0.connection_keep_alive()
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<
        ConnectionHandlerEvent<Self::OutboundProtocol, Self::OutboundOpenInfo, Self::ToBehaviour>,
    > {
        self.0.poll(cx)
    }

    fn poll_close(&mut self, cx: &mut Context<'_>) -> Poll<Option<Self::ToBehaviour>> {
        self.0.poll_close(cx)
    }

    fn on_behaviour_event(&mut self, event: Self::FromBehaviour) {
        self.0.on_behaviour_event(event)
    }

    fn on_connection_event(
        &mut self,
        event: ConnectionEvent<
            '_,
            Self::InboundProtocol,
            Self::OutboundProtocol,
            Self::InboundOpenInfo,
            Self::OutboundOpenInfo,
        >,
    ) {
        self.0.on_connection_event(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The point of the wrapper: a connection task holds a pointer, not the VN's handler.
    #[test]
    fn the_boxed_handler_is_one_pointer_and_the_vns_handler_is_not() {
        type Vn = super::super::behaviour::VnBehaviour;
        assert_eq!(
            std::mem::size_of::<THandler<BoxedHandlers<Vn>>>(),
            std::mem::size_of::<usize>()
        );
        assert!(std::mem::size_of::<THandler<Vn>>() > 1024);
    }
}
