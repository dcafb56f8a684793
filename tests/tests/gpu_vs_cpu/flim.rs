//! FLIM: GPU vs CPU (issue 4). Not built yet.
