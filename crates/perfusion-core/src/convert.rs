//! Signal to concentration.
