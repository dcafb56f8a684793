//! DCE perfusion: GPU vs CPU (issue 6). Not built yet.
