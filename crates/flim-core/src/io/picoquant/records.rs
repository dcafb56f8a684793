//! PicoQuant's 32-bit TTTR record layouts (the same in `.ptu`, `.pt3` and `.ht3` files) and
//! their decoders.
//!
//! T3 records carry the decay time of each photon relative to the last laser sync:
//! - PicoHarp 300 (`0x00010303`): sync count 16 bits, decay time 12, channel 4 (1..4; 15 is
//!   special: decay-time bits 0 = sync overflow of 65536, else marker bits).
//! - HydraHarp V1 (`0x00010304`), HydraHarp V2, TimeHarp 260 N/P, MultiHarp and PicoHarp 330
//!   (`0x01010304`, `0x00010305`, `0x00010306`, `0x00010307`): sync 10 bits, decay time 15,
//!   channel 6, special 1 (channel 63 = overflow of 1024 syncs, V2 and later: times the sync
//!   field; channels 1..15 = marker bits).
//!
//! T2 records carry only an absolute time tag per event. A decay time exists only relative
//! to the laser sync, so T2 is histogrammed by pairing each photon with the sync event before
//! it (see [`SyncSource`]):
//! - PicoHarp 300 (`0x00010203`): time 28 bits, channel 4 (0..3 inputs; 15 special: time
//!   bits 0..3 = 0 an overflow of 210698240, else marker bits). It records no sync event: one
//!   of its inputs must be named as the sync (`--sync-channel`).
//! - HydraHarp V1 (`0x00010204`), V2 and later (`0x01010204`, `0x00010205..7`): time 25 bits,
//!   channel 6, special 1 (channel 63 = overflow of 33552000 (V1) or 33554432 times the time
//!   field (V2); channel 0 = a sync event; 1..15 = marker bits).

use crate::io::photons::{Decode, Event};

/// The record layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RecordKind {
    PicoHarpT3,
    HydraHarpV1T3,
    /// HydraHarp V2, TimeHarp 260 N/P, MultiHarp, PicoHarp 330.
    HydraHarpV2T3,
    PicoHarpT2,
    HydraHarpV1T2,
    HydraHarpV2T2,
}

impl RecordKind {
    /// The layout and instrument name of a `TTResultFormat_TTTRRecType` code.
    pub(crate) fn of(code: i64) -> std::result::Result<(Self, &'static str), String> {
        Ok(match code {
            0x0001_0303 => (Self::PicoHarpT3, "PicoHarp 300 T3"),
            0x0001_0304 => (Self::HydraHarpV1T3, "HydraHarp V1 T3"),
            0x0101_0304 => (Self::HydraHarpV2T3, "HydraHarp V2 T3"),
            0x0001_0305 => (Self::HydraHarpV2T3, "TimeHarp 260N T3"),
            0x0001_0306 => (Self::HydraHarpV2T3, "TimeHarp 260P T3"),
            0x0001_0307 => (Self::HydraHarpV2T3, "MultiHarp / PicoHarp 330 T3"),
            0x0001_0203 => (Self::PicoHarpT2, "PicoHarp 300 T2"),
            0x0001_0204 => (Self::HydraHarpV1T2, "HydraHarp V1 T2"),
            0x0101_0204 => (Self::HydraHarpV2T2, "HydraHarp V2 T2"),
            0x0001_0205 => (Self::HydraHarpV2T2, "TimeHarp 260N T2"),
            0x0001_0206 => (Self::HydraHarpV2T2, "TimeHarp 260P T2"),
            0x0001_0207 => (Self::HydraHarpV2T2, "MultiHarp / PicoHarp 330 T2"),
            other => return Err(format!("unknown record type {other:#010x}")),
        })
    }

    /// True for T2 (absolute time tags) layouts.
    pub(crate) fn is_t2(self) -> bool {
        matches!(
            self,
            Self::PicoHarpT2 | Self::HydraHarpV1T2 | Self::HydraHarpV2T2
        )
    }

    /// Decay-time channels a T3 record can hold.
    pub(crate) fn t3_dtime_channels(self) -> usize {
        match self {
            Self::PicoHarpT3 => 1 << 12,
            _ => 1 << 15,
        }
    }
}

/// A T3 record decoder: photons carry their sync count and decay-time channel.
#[derive(Debug)]
pub(crate) struct T3Decoder {
    kind: RecordKind,
    overflow: u64,
}

impl T3Decoder {
    pub(crate) fn new(kind: RecordKind) -> Self {
        debug_assert!(!kind.is_t2());
        Self { kind, overflow: 0 }
    }
}

impl Decode for T3Decoder {
    fn decode(&mut self, rec: u32) -> std::result::Result<Event, String> {
        if self.kind == RecordKind::PicoHarpT3 {
            let nsync = u64::from(rec & 0xFFFF);
            let chan = rec >> 28;
            let dtime = (rec >> 16) & 0xFFF;
            return match chan {
                15 => {
                    let bits = dtime & 0xF;
                    if bits == 0 {
                        self.overflow += 1 << 16;
                        Ok(Event::Nothing)
                    } else {
                        Ok(Event::Marker {
                            sync: self.overflow + nsync,
                            bits,
                        })
                    }
                }
                1..=4 => Ok(Event::Photon {
                    sync: self.overflow + nsync,
                    dtime,
                    channel: chan - 1,
                }),
                c => Err(format!(
                    "channel field {c} is neither a detector (1-4) nor special (15)"
                )),
            };
        }
        let nsync = u64::from(rec & 0x3FF);
        let dtime = (rec >> 10) & 0x7FFF;
        let chan = (rec >> 25) & 0x3F;
        if rec >> 31 == 0 {
            return Ok(Event::Photon {
                sync: self.overflow + nsync,
                dtime,
                channel: chan,
            });
        }
        match chan {
            63 => {
                let n = if self.kind == RecordKind::HydraHarpV1T3 || nsync == 0 {
                    1
                } else {
                    nsync
                };
                self.overflow += 1024 * n;
                Ok(Event::Nothing)
            }
            1..=15 => Ok(Event::Marker {
                sync: self.overflow + nsync,
                bits: chan,
            }),
            c => Err(format!(
                "special record with channel field {c}: neither a marker (1-15) nor an overflow (63)"
            )),
        }
    }
}

/// Which T2 events are the laser sync that decay times are measured from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncSource {
    /// The sync events the instrument records (HydraHarp and later: special channel 0).
    Recorded,
    /// Every event of this detector input (0-based) is a sync; it is not a photon.
    Input(u32),
}

/// A T2 record decoder that pairs each photon with the last sync before it: the decay time
/// is the time since that sync, in time-tag units. Photons before the first sync are dropped
/// (counted).
#[derive(Debug)]
pub(crate) struct T2Decoder {
    kind: RecordKind,
    sync: SyncSource,
    overflow: u64,
    last_sync: Option<u64>,
    syncs: u64,
    before_first_sync: u64,
}

impl T2Decoder {
    pub(crate) fn new(kind: RecordKind, sync: SyncSource) -> Self {
        debug_assert!(kind.is_t2());
        Self {
            kind,
            sync,
            overflow: 0,
            last_sync: None,
            syncs: 0,
            before_first_sync: 0,
        }
    }

    /// A detector event at absolute time `t` on input `channel`.
    fn detector(&mut self, t: u64, channel: u32) -> Event {
        if self.sync == SyncSource::Input(channel) {
            return self.sync_at(t);
        }
        if let Some(s) = self.last_sync {
            Event::Photon {
                sync: t,
                dtime: u32::try_from(t - s).unwrap_or(u32::MAX),
                channel,
            }
        } else {
            self.before_first_sync += 1;
            Event::Nothing
        }
    }

    fn sync_at(&mut self, t: u64) -> Event {
        self.last_sync = Some(t);
        self.syncs += 1;
        Event::Nothing
    }
}

/// Overflow period of PicoHarp 300 T2 time tags.
const PICOHARP_T2_WRAP: u64 = 210_698_240;
/// Overflow period of HydraHarp V1 T2 time tags.
const HYDRAHARP_V1_T2_WRAP: u64 = 33_552_000;
/// Overflow period of HydraHarp V2 (and later) T2 time tags.
const HYDRAHARP_V2_T2_WRAP: u64 = 33_554_432;

impl Decode for T2Decoder {
    fn decode(&mut self, rec: u32) -> std::result::Result<Event, String> {
        if self.kind == RecordKind::PicoHarpT2 {
            let time = u64::from(rec & 0x0FFF_FFFF);
            let chan = rec >> 28;
            return match chan {
                15 => {
                    let bits = rec & 0xF;
                    if bits == 0 {
                        self.overflow += PICOHARP_T2_WRAP;
                        Ok(Event::Nothing)
                    } else {
                        Ok(Event::Marker {
                            sync: self.overflow + time,
                            bits,
                        })
                    }
                }
                0..=3 => Ok(self.detector(self.overflow + time, chan)),
                c => Err(format!(
                    "channel field {c} is neither an input (0-3) nor special (15)"
                )),
            };
        }
        let time = u64::from(rec & 0x01FF_FFFF);
        let chan = (rec >> 25) & 0x3F;
        if rec >> 31 == 0 {
            return Ok(self.detector(self.overflow + time, chan));
        }
        match chan {
            63 => {
                self.overflow += if self.kind == RecordKind::HydraHarpV1T2 {
                    HYDRAHARP_V1_T2_WRAP
                } else {
                    HYDRAHARP_V2_T2_WRAP * time.max(1)
                };
                Ok(Event::Nothing)
            }
            0 if self.sync == SyncSource::Recorded => Ok(self.sync_at(self.overflow + time)),
            0 => Ok(Event::Nothing),
            1..=15 => Ok(Event::Marker {
                sync: self.overflow + time,
                bits: chan,
            }),
            c => Err(format!(
                "special record with channel field {c}: neither sync (0), a marker (1-15) nor an overflow (63)"
            )),
        }
    }

    fn metadata(&self) -> Vec<(String, String)> {
        let source = match self.sync {
            SyncSource::Recorded => "recorded sync events".to_string(),
            SyncSource::Input(c) => format!("input {c}"),
        };
        vec![
            ("T2 sync".into(), source),
            ("T2 sync events".into(), self.syncs.to_string()),
            (
                "photons before the first sync".into(),
                self.before_first_sync.to_string(),
            ),
        ]
    }

    fn finish(&self) -> std::result::Result<(), String> {
        if self.syncs > 0 {
            return Ok(());
        }
        Err(match self.sync {
            SyncSource::Recorded => "T2 records: no sync event in the file. A decay time is the time from a laser pulse to the photon, so T2 data have no lifetime histogram without the laser sync: record the sync (HydraHarp/MultiHarp: sync input enabled), or name the detector input that saw the laser (--sync-channel N)".into(),
            SyncSource::Input(c) => format!(
                "T2 records: input {c}, named as the sync (--sync-channel), has no event in the file"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picoharp_records_decode_photons_markers_and_overflows() {
        let mut d = T3Decoder::new(RecordKind::PicoHarpT3);
        // Channel 1, dtime 33, nsync 9386 (a photon from the real hazelnut file).
        assert_eq!(
            d.decode(0x1021_24aa),
            Ok(Event::Photon {
                sync: 9386,
                dtime: 33,
                channel: 0
            })
        );
        assert_eq!(d.decode(0xf000_0000), Ok(Event::Nothing));
        assert_eq!(
            d.decode(0xf001_0005),
            Ok(Event::Marker {
                sync: 65536 + 5,
                bits: 1
            })
        );
        assert!(d.decode(0x7000_0000).is_err(), "channel 7 is invalid");
    }

    #[test]
    fn hydraharp_v2_overflow_counts_multiply() {
        let mut d = T3Decoder::new(RecordKind::HydraHarpV2T3);
        assert_eq!(d.decode(0xFE00_0003), Ok(Event::Nothing));
        assert_eq!(d.overflow, 3 * 1024);
        let photon = (2 << 25) | (100 << 10) | 7;
        assert_eq!(
            d.decode(photon),
            Ok(Event::Photon {
                sync: 3 * 1024 + 7,
                dtime: 100,
                channel: 2
            })
        );
        assert_eq!(
            d.decode(0x8000_0000 | (4 << 25) | 9),
            Ok(Event::Marker {
                sync: 3 * 1024 + 9,
                bits: 4
            })
        );
        let mut v1 = T3Decoder::new(RecordKind::HydraHarpV1T3);
        v1.decode(0xFE00_0003).unwrap();
        assert_eq!(v1.overflow, 1024, "V1 overflows count one period each");
    }

    #[test]
    fn hydraharp_t2_photons_are_timed_from_the_last_recorded_sync() {
        let mut d = T2Decoder::new(RecordKind::HydraHarpV2T2, SyncSource::Recorded);
        // A photon before any sync is dropped and counted.
        assert_eq!(d.decode((1 << 25) + 50), Ok(Event::Nothing));
        assert_eq!(d.decode(0x8000_0000 + 1000), Ok(Event::Nothing)); // sync at 1000
        assert_eq!(
            d.decode((1 << 25) + 1234),
            Ok(Event::Photon {
                sync: 1234,
                dtime: 234,
                channel: 1
            })
        );
        // Two overflows at once, then a sync and a photon past the wrap.
        d.decode(0xFE00_0002).unwrap();
        d.decode(0x8000_0000 | 5).unwrap();
        assert_eq!(
            d.decode(17),
            Ok(Event::Photon {
                sync: 2 * HYDRAHARP_V2_T2_WRAP + 17,
                dtime: 12,
                channel: 0
            })
        );
        assert!(d.finish().is_ok());
        assert_eq!(d.metadata()[2].1, "1");
    }

    #[test]
    fn picoharp_t2_needs_a_named_sync_input() {
        let mut d = T2Decoder::new(RecordKind::PicoHarpT2, SyncSource::Input(0));
        d.decode(100).unwrap(); // input 0 at 100: a sync
        assert_eq!(
            d.decode((1 << 28) + 180),
            Ok(Event::Photon {
                sync: 180,
                dtime: 80,
                channel: 1
            })
        );
        let none = T2Decoder::new(RecordKind::PicoHarpT2, SyncSource::Recorded);
        let e = none.finish().unwrap_err();
        assert!(e.contains("--sync-channel"), "{e}");
    }

    #[test]
    fn every_layout_code_is_known_or_refused() {
        assert!(RecordKind::of(0x0001_0203).unwrap().0.is_t2());
        assert!(!RecordKind::of(0x0001_0307).unwrap().0.is_t2());
        assert!(RecordKind::of(0x1234).is_err());
    }
}
