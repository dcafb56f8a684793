//! Monte Carlo light transport: GPU vs CPU (issue 5). Not built yet.
