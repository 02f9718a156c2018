//! vipflow's own address management for LoadBalancer Services: pools of addresses (the
//! `VipPool` kind), and the allocator that hands them out, keeps them stable and never gives
//! one address to two Services that cannot share it.
//!
//! Sans-IO like the planners: the elected instance reads pools and Services, asks the
//! [`Allocator`], and writes the Services' status with the [`Terms`] each was decided on;
//! restarts and leader changes rebuild the allocator from those statuses
//! ([`Allocator::reserve_all`] before [`Allocator::assign`]).

pub mod allocator;
pub mod controller;
pub mod free_space;
pub mod pool;
pub mod pool_object;
pub mod request;
pub mod selector;
pub mod service;

pub use allocator::Allocator;
pub use pool::{AllocationRules, Family, Pool, PoolProblem, PoolSpec};
pub use request::{
    AllocError, AllocRequest, Assigned, ReserveConflict, ShareRefusal, StackPolicy, Terms, Usage,
};
