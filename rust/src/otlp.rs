//! OTLP metrics push (`POST /v1/metrics`): gzip with a decoded-size cap, and protobuf
//! `ExportMetricsServiceRequest` decoding into plain structs holding what the gateway's
//! accept/reject rules need. Pure: no I/O, no pyo3. The rules themselves live in Python
//! (edgegw/telemetry/otlp.py), which also reads the JSON (protojson) encoding into the same shape.

use std::io::Read;

use flate2::bufread::MultiGzDecoder;
use prost::Message;

use crate::error::Rejection;

/// inference-gateway's cap on a decoded OTLP payload (`4 << 20`), kept so that clients
/// tuned against it keep working. It bounds memory per request, gzip bombs included.
pub const MAX_DECODED_BYTES: usize = 4 << 20;

/// Data points one request may carry. A 4 MiB payload of empty points (2 bytes each)
/// would otherwise expand ~100x once turned into Python objects; real exporters send
/// hundreds per interval.
pub const MAX_DATA_POINTS: usize = 50_000;

/// String attributes kept per request (resource and data points together), for the same
/// reason as `MAX_DATA_POINTS`.
pub const MAX_ATTRIBUTES: usize = 200_000;

/// Decoded bytes produced per read: the most held outside the output buffer.
const GUNZIP_STEP: usize = 32 * 1024;

/// `AggregationTemporality` values of opentelemetry-proto.
pub const TEMPORALITY_UNSPECIFIED: i32 = 0;
pub const TEMPORALITY_DELTA: i32 = 1;
pub const TEMPORALITY_CUMULATIVE: i32 = 2;

/// Decode gzip (one or more concatenated members) into at most `cap` bytes.
///
/// The output never grows past `cap`: reading stops at the first step that would cross it
/// (`PayloadTooLarge`). Anything that is not complete, valid gzip (empty input, a bad
/// header or checksum, truncation, trailing garbage) is `InvalidGzip`.
pub fn gunzip_capped(data: &[u8], cap: usize) -> Result<Vec<u8>, Rejection> {
    if data.is_empty() {
        return Err(Rejection::InvalidGzip);
    }
    let mut decoder = MultiGzDecoder::new(data);
    // Most OTLP payloads compress 4-10x; start there, grow by doubling, never past cap.
    let mut out: Vec<u8> = Vec::with_capacity(data.len().saturating_mul(4).min(cap));
    let mut step = vec![0u8; GUNZIP_STEP];
    loop {
        let n = match decoder.read(&mut step) {
            Ok(0) => return Ok(out),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Err(Rejection::InvalidGzip),
        };
        let need = out.len() + n;
        if need > cap {
            return Err(Rejection::PayloadTooLarge { limit: cap });
        }
        if need > out.capacity() {
            let target = out.capacity().saturating_mul(2).max(need).min(cap);
            out.reserve_exact(target - out.len());
        }
        out.extend_from_slice(&step[..n]);
    }
}

/// The data of one metric, by kind. Points of kinds the rules never accept keep only
/// their attributes (they are counted, not recorded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A metric whose `data` oneof is unset.
    Empty,
    Gauge,
    Sum,
    Histogram,
    ExponentialHistogram,
    Summary,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Empty => "",
            Kind::Gauge => "gauge",
            Kind::Sum => "sum",
            Kind::Histogram => "histogram",
            Kind::ExponentialHistogram => "exponential_histogram",
            Kind::Summary => "summary",
        }
    }
}

/// String-valued attributes in wire order (a repeated key: the last one wins when read
/// into a map). Attributes of other value types are dropped.
pub type Attributes = Vec<(String, String)>;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    Int(i64),
    Double(f64),
}

#[derive(Debug, Clone, PartialEq)]
pub struct NumberPoint {
    pub attributes: Attributes,
    pub value: Option<Number>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HistogramPoint {
    pub attributes: Attributes,
    pub count: u64,
    pub sum: Option<f64>,
    pub bucket_counts: Vec<u64>,
    pub explicit_bounds: Vec<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Points {
    /// Gauge and Sum points.
    Number(Vec<NumberPoint>),
    Histogram(Vec<HistogramPoint>),
    /// Exponential histogram and summary points: attributes only.
    Other(Vec<Attributes>),
}

impl Points {
    pub fn len(&self) -> usize {
        match self {
            Points::Number(p) => p.len(),
            Points::Histogram(p) => p.len(),
            Points::Other(p) => p.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Metric {
    pub name: String,
    pub kind: Kind,
    /// `AggregationTemporality` as sent (0 for kinds that have none).
    pub temporality: i32,
    /// `is_monotonic` of a Sum; false otherwise.
    pub monotonic: bool,
    pub points: Points,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ResourceMetrics {
    /// The resource's `service.name`, when it is a string.
    pub service_name: Option<String>,
    /// The metrics of every instrumentation scope of the resource, in order.
    pub metrics: Vec<Metric>,
}

/// Decode a protobuf `ExportMetricsServiceRequest`.
pub fn decode_metrics(data: &[u8]) -> Result<Vec<ResourceMetrics>, Rejection> {
    let request =
        pb::ExportMetricsServiceRequest::decode(data).map_err(|_| Rejection::InvalidOtlp)?;
    let mut budget = Budget {
        points: MAX_DATA_POINTS,
        attributes: MAX_ATTRIBUTES,
    };
    request
        .resource_metrics
        .into_iter()
        .map(|rm| budget.resource(rm))
        .collect()
}

/// A protobuf `ExportMetricsServiceResponse`. `partial_success` is always set, with zeros
/// when nothing was rejected, as inference-gateway answers (its document's example).
pub fn encode_response(rejected_data_points: i64, error_message: &str) -> Vec<u8> {
    let partial_success = Some(pb::ExportMetricsPartialSuccess {
        rejected_data_points,
        error_message: error_message.to_string(),
    });
    pb::ExportMetricsServiceResponse { partial_success }.encode_to_vec()
}

/// What is left of the per-request limits while converting.
struct Budget {
    points: usize,
    attributes: usize,
}

impl Budget {
    fn take_points(&mut self, n: usize) -> Result<(), Rejection> {
        self.points = self
            .points
            .checked_sub(n)
            .ok_or(Rejection::TooManyDataPoints {
                limit: MAX_DATA_POINTS,
            })?;
        Ok(())
    }

    fn attributes(&mut self, kvs: Vec<pb::KeyValue>) -> Result<Attributes, Rejection> {
        let out: Attributes = kvs
            .into_iter()
            .filter_map(|kv| Some((kv.key, kv.value?.string_value?)))
            .collect();
        self.attributes =
            self.attributes
                .checked_sub(out.len())
                .ok_or(Rejection::TooManyDataPoints {
                    limit: MAX_ATTRIBUTES,
                })?;
        Ok(out)
    }

    fn resource(&mut self, rm: pb::ResourceMetrics) -> Result<ResourceMetrics, Rejection> {
        let attributes = self.attributes(rm.resource.map(|r| r.attributes).unwrap_or_default())?;
        let service_name = attributes
            .into_iter()
            .rev()
            .find(|(k, _)| k == "service.name")
            .map(|(_, v)| v);
        let mut metrics = Vec::new();
        for scope in rm.scope_metrics {
            for metric in scope.metrics {
                metrics.push(self.metric(metric)?);
            }
        }
        Ok(ResourceMetrics {
            service_name,
            metrics,
        })
    }

    fn metric(&mut self, m: pb::Metric) -> Result<Metric, Rejection> {
        use pb::metric::Data;
        let (kind, temporality, monotonic, points) = match m.data {
            None => (Kind::Empty, 0, false, Points::Other(Vec::new())),
            Some(Data::Gauge(g)) => (Kind::Gauge, 0, false, self.numbers(g.data_points)?),
            Some(Data::Sum(s)) => (
                Kind::Sum,
                s.aggregation_temporality,
                s.is_monotonic,
                self.numbers(s.data_points)?,
            ),
            Some(Data::Histogram(h)) => {
                self.take_points(h.data_points.len())?;
                let mut points = Vec::with_capacity(h.data_points.len());
                for p in h.data_points {
                    points.push(HistogramPoint {
                        attributes: self.attributes(p.attributes)?,
                        count: p.count,
                        sum: p.sum,
                        bucket_counts: p.bucket_counts,
                        explicit_bounds: p.explicit_bounds,
                    });
                }
                (
                    Kind::Histogram,
                    h.aggregation_temporality,
                    false,
                    Points::Histogram(points),
                )
            }
            Some(Data::ExponentialHistogram(h)) => {
                let attrs = h.data_points.into_iter().map(|p| p.attributes);
                let points = self.others(attrs)?;
                (
                    Kind::ExponentialHistogram,
                    h.aggregation_temporality,
                    false,
                    points,
                )
            }
            Some(Data::Summary(s)) => {
                let attrs = s.data_points.into_iter().map(|p| p.attributes);
                (Kind::Summary, 0, false, self.others(attrs)?)
            }
        };
        Ok(Metric {
            name: m.name,
            kind,
            temporality,
            monotonic,
            points,
        })
    }

    fn numbers(&mut self, points: Vec<pb::NumberDataPoint>) -> Result<Points, Rejection> {
        self.take_points(points.len())?;
        let mut out = Vec::with_capacity(points.len());
        for p in points {
            out.push(NumberPoint {
                attributes: self.attributes(p.attributes)?,
                value: p.value.map(|v| match v {
                    pb::number_data_point::Value::AsInt(i) => Number::Int(i),
                    pb::number_data_point::Value::AsDouble(d) => Number::Double(d),
                }),
            });
        }
        Ok(Points::Number(out))
    }

    fn others(
        &mut self,
        points: impl ExactSizeIterator<Item = Vec<pb::KeyValue>>,
    ) -> Result<Points, Rejection> {
        self.take_points(points.len())?;
        let mut out = Vec::with_capacity(points.len());
        for attrs in points {
            out.push(self.attributes(attrs)?);
        }
        Ok(Points::Other(out))
    }
}

/// The subset of opentelemetry-proto (collector/metrics/v1, metrics/v1, common/v1,
/// resource/v1) the rules read, with the upstream field numbers. Fields left out are
/// skipped by the decoder (still checked for well-formed wire format).
mod pb {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExportMetricsServiceRequest {
        #[prost(message, repeated, tag = "1")]
        pub resource_metrics: Vec<ResourceMetrics>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExportMetricsServiceResponse {
        #[prost(message, optional, tag = "1")]
        pub partial_success: Option<ExportMetricsPartialSuccess>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExportMetricsPartialSuccess {
        #[prost(int64, tag = "1")]
        pub rejected_data_points: i64,
        #[prost(string, tag = "2")]
        pub error_message: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ResourceMetrics {
        #[prost(message, optional, tag = "1")]
        pub resource: Option<Resource>,
        #[prost(message, repeated, tag = "2")]
        pub scope_metrics: Vec<ScopeMetrics>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Resource {
        #[prost(message, repeated, tag = "1")]
        pub attributes: Vec<KeyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ScopeMetrics {
        #[prost(message, repeated, tag = "2")]
        pub metrics: Vec<Metric>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Metric {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(oneof = "metric::Data", tags = "5, 7, 9, 10, 11")]
        pub data: Option<metric::Data>,
    }

    pub mod metric {
        #[derive(Clone, PartialEq, prost::Oneof)]
        pub enum Data {
            #[prost(message, tag = "5")]
            Gauge(super::Gauge),
            #[prost(message, tag = "7")]
            Sum(super::Sum),
            #[prost(message, tag = "9")]
            Histogram(super::Histogram),
            #[prost(message, tag = "10")]
            ExponentialHistogram(super::ExponentialHistogram),
            #[prost(message, tag = "11")]
            Summary(super::Summary),
        }
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Gauge {
        #[prost(message, repeated, tag = "1")]
        pub data_points: Vec<NumberDataPoint>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sum {
        #[prost(message, repeated, tag = "1")]
        pub data_points: Vec<NumberDataPoint>,
        #[prost(int32, tag = "2")]
        pub aggregation_temporality: i32,
        #[prost(bool, tag = "3")]
        pub is_monotonic: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Histogram {
        #[prost(message, repeated, tag = "1")]
        pub data_points: Vec<HistogramDataPoint>,
        #[prost(int32, tag = "2")]
        pub aggregation_temporality: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExponentialHistogram {
        #[prost(message, repeated, tag = "1")]
        pub data_points: Vec<ExponentialHistogramDataPoint>,
        #[prost(int32, tag = "2")]
        pub aggregation_temporality: i32,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Summary {
        #[prost(message, repeated, tag = "1")]
        pub data_points: Vec<SummaryDataPoint>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct NumberDataPoint {
        #[prost(message, repeated, tag = "7")]
        pub attributes: Vec<KeyValue>,
        #[prost(oneof = "number_data_point::Value", tags = "4, 6")]
        pub value: Option<number_data_point::Value>,
    }

    pub mod number_data_point {
        #[derive(Clone, Copy, PartialEq, prost::Oneof)]
        pub enum Value {
            #[prost(double, tag = "4")]
            AsDouble(f64),
            #[prost(sfixed64, tag = "6")]
            AsInt(i64),
        }
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct HistogramDataPoint {
        #[prost(message, repeated, tag = "9")]
        pub attributes: Vec<KeyValue>,
        #[prost(fixed64, tag = "4")]
        pub count: u64,
        #[prost(double, optional, tag = "5")]
        pub sum: Option<f64>,
        #[prost(fixed64, repeated, tag = "6")]
        pub bucket_counts: Vec<u64>,
        #[prost(double, repeated, tag = "7")]
        pub explicit_bounds: Vec<f64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ExponentialHistogramDataPoint {
        #[prost(message, repeated, tag = "1")]
        pub attributes: Vec<KeyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct SummaryDataPoint {
        #[prost(message, repeated, tag = "7")]
        pub attributes: Vec<KeyValue>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct KeyValue {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(message, optional, tag = "2")]
        pub value: Option<AnyValue>,
    }

    /// Only `string_value` is read; the other members of the `value` oneof are skipped.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AnyValue {
        #[prost(string, optional, tag = "1")]
        pub string_value: Option<String>,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use flate2::Compression;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut enc = GzEncoder::new(Vec::new(), Compression::default());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    #[test]
    fn gunzip_round_trips() {
        let data: Vec<u8> = (0..100_000u32).flat_map(|i| i.to_le_bytes()).collect();
        assert_eq!(
            gunzip_capped(&gzip(&data), MAX_DECODED_BYTES).unwrap(),
            data
        );
        assert_eq!(gunzip_capped(&gzip(b""), 10).unwrap(), b"");
    }

    #[test]
    fn gunzip_reads_concatenated_members() {
        let mut body = gzip(b"hello, ");
        body.extend(gzip(b""));
        body.extend(gzip(b"world"));
        assert_eq!(gunzip_capped(&body, 100).unwrap(), b"hello, world");
    }

    #[test]
    fn gunzip_cap_is_exact() {
        let data = vec![7u8; 1000];
        let body = gzip(&data);
        assert_eq!(gunzip_capped(&body, 1000).unwrap().len(), 1000);
        assert_eq!(
            gunzip_capped(&body, 999),
            Err(Rejection::PayloadTooLarge { limit: 999 })
        );
    }

    #[test]
    fn gzip_bomb_is_413_without_holding_it() {
        // 64 MiB of zeros: about 64 KiB of gzip.
        let body = gzip(&vec![0u8; 64 << 20]);
        assert!(body.len() < 128 * 1024);
        let err = gunzip_capped(&body, MAX_DECODED_BYTES).unwrap_err();
        assert_eq!(
            err,
            Rejection::PayloadTooLarge {
                limit: MAX_DECODED_BYTES
            }
        );
        assert_eq!((err.status(), err.code()), (413, "payload_too_large"));
        assert_eq!(err.message(), "Payload exceeds 4 MiB limit");
    }

    #[test]
    fn bomb_split_over_members_is_413() {
        let member = gzip(&vec![0u8; 3 << 20]);
        let body = [member.clone(), member].concat();
        assert_eq!(
            gunzip_capped(&body, MAX_DECODED_BYTES),
            Err(Rejection::PayloadTooLarge {
                limit: MAX_DECODED_BYTES
            })
        );
    }

    #[test]
    fn bad_gzip_is_400() {
        let good = gzip(b"some OTLP bytes, long enough to matter");
        let mut bad_crc = good.clone();
        let n = bad_crc.len();
        bad_crc[n - 6] ^= 0xff;
        let mut trailing = good.clone();
        trailing.extend_from_slice(b"garbage");
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", Vec::new()),
            ("not gzip", b"\x0a\x00plain protobuf".to_vec()),
            ("header only", good[..10].to_vec()),
            ("truncated", good[..good.len() - 1].to_vec()),
            ("truncated mid-stream", good[..good.len() / 2].to_vec()),
            ("bad crc", bad_crc),
            ("trailing garbage", trailing),
        ];
        for (name, body) in cases {
            let err = gunzip_capped(&body, MAX_DECODED_BYTES).unwrap_err();
            assert_eq!(err, Rejection::InvalidGzip, "{name}");
            assert_eq!(
                (err.status(), err.code()),
                (400, "invalid_request"),
                "{name}"
            );
        }
    }

    #[test]
    fn every_prefix_of_gzip_is_ok_or_invalid() {
        let body = gzip(b"0123456789abcdef0123456789abcdef");
        for i in 0..body.len() {
            assert_eq!(gunzip_capped(&body[..i], 1000), Err(Rejection::InvalidGzip));
        }
    }

    fn kv(key: &str, value: &str) -> pb::KeyValue {
        pb::KeyValue {
            key: key.into(),
            value: Some(pb::AnyValue {
                string_value: Some(value.into()),
            }),
        }
    }

    fn request(metrics: Vec<pb::Metric>) -> Vec<u8> {
        pb::ExportMetricsServiceRequest {
            resource_metrics: vec![pb::ResourceMetrics {
                resource: Some(pb::Resource {
                    attributes: vec![kv("service.name", "my-agent"), kv("host.name", "h")],
                }),
                scope_metrics: vec![pb::ScopeMetrics { metrics }],
            }],
        }
        .encode_to_vec()
    }

    fn sum_metric(name: &str, temporality: i32, monotonic: bool, values: &[i64]) -> pb::Metric {
        pb::Metric {
            name: name.into(),
            data: Some(pb::metric::Data::Sum(pb::Sum {
                data_points: values
                    .iter()
                    .map(|v| pb::NumberDataPoint {
                        attributes: vec![kv("gen_ai.token.type", "input")],
                        value: Some(pb::number_data_point::Value::AsInt(*v)),
                    })
                    .collect(),
                aggregation_temporality: temporality,
                is_monotonic: monotonic,
            })),
        }
    }

    #[test]
    fn decodes_sums_and_histograms() {
        let hist = pb::Metric {
            name: "gen_ai.server.request.duration".into(),
            data: Some(pb::metric::Data::Histogram(pb::Histogram {
                data_points: vec![pb::HistogramDataPoint {
                    attributes: vec![kv("team", "search")],
                    count: 6,
                    sum: Some(3.5),
                    bucket_counts: vec![1, 2, 3],
                    explicit_bounds: vec![0.5, 1.0],
                }],
                aggregation_temporality: TEMPORALITY_DELTA,
            })),
        };
        let body = request(vec![
            sum_metric(
                "gen_ai.client.token.usage",
                TEMPORALITY_DELTA,
                true,
                &[5, -1],
            ),
            hist,
        ]);
        let got = decode_metrics(&body).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].service_name.as_deref(), Some("my-agent"));
        let [sum, hist] = &got[0].metrics[..] else {
            panic!("two metrics expected")
        };
        assert_eq!(sum.name, "gen_ai.client.token.usage");
        assert_eq!(
            (sum.kind, sum.temporality, sum.monotonic),
            (Kind::Sum, 1, true)
        );
        let Points::Number(points) = &sum.points else {
            panic!()
        };
        assert_eq!(points[0].value, Some(Number::Int(5)));
        assert_eq!(points[1].value, Some(Number::Int(-1)));
        assert_eq!(
            points[0].attributes,
            vec![("gen_ai.token.type".to_string(), "input".to_string())]
        );
        assert_eq!((hist.kind, hist.temporality), (Kind::Histogram, 1));
        let Points::Histogram(points) = &hist.points else {
            panic!()
        };
        assert_eq!(
            points[0],
            HistogramPoint {
                attributes: vec![("team".into(), "search".into())],
                count: 6,
                sum: Some(3.5),
                bucket_counts: vec![1, 2, 3],
                explicit_bounds: vec![0.5, 1.0],
            }
        );
    }

    #[test]
    fn decodes_other_kinds_as_counted_points() {
        let body = request(vec![
            pb::Metric {
                name: "g".into(),
                data: Some(pb::metric::Data::Gauge(pb::Gauge {
                    data_points: vec![pb::NumberDataPoint {
                        attributes: vec![],
                        value: Some(pb::number_data_point::Value::AsDouble(1.5)),
                    }],
                })),
            },
            pb::Metric {
                name: "e".into(),
                data: Some(pb::metric::Data::ExponentialHistogram(
                    pb::ExponentialHistogram {
                        data_points: vec![Default::default(), Default::default()],
                        aggregation_temporality: TEMPORALITY_CUMULATIVE,
                    },
                )),
            },
            pb::Metric {
                name: "s".into(),
                data: Some(pb::metric::Data::Summary(pb::Summary {
                    data_points: vec![Default::default()],
                })),
            },
            pb::Metric {
                name: "none".into(),
                data: None,
            },
        ]);
        let got = decode_metrics(&body).unwrap();
        let kinds: Vec<(Kind, usize)> = got[0]
            .metrics
            .iter()
            .map(|m| (m.kind, m.points.len()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (Kind::Gauge, 1),
                (Kind::ExponentialHistogram, 2),
                (Kind::Summary, 1),
                (Kind::Empty, 0)
            ]
        );
        assert_eq!(got[0].metrics[1].temporality, TEMPORALITY_CUMULATIVE);
    }

    /// A KeyValue whose value is an `int_value` (AnyValue field 3).
    #[derive(Clone, PartialEq, prost::Message)]
    struct IntAnyValue {
        #[prost(int64, tag = "3")]
        int_value: i64,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    struct IntKeyValue {
        #[prost(string, tag = "1")]
        key: String,
        #[prost(message, optional, tag = "2")]
        value: Option<IntAnyValue>,
    }

    #[test]
    fn non_string_attributes_are_dropped() {
        // Resource { attributes: [ {key: "service.name", int_value: 3} ] } by hand.
        let attr = IntKeyValue {
            key: "service.name".into(),
            value: Some(IntAnyValue { int_value: 3 }),
        }
        .encode_to_vec();
        let mut resource = vec![0x0a, attr.len() as u8];
        resource.extend(attr);
        let mut rm = vec![0x0a, resource.len() as u8];
        rm.extend(resource);
        let mut body = vec![0x0a, rm.len() as u8];
        body.extend(rm);
        let got = decode_metrics(&body).unwrap();
        assert_eq!(got[0].service_name, None);
    }

    #[test]
    fn empty_request_is_empty() {
        assert_eq!(decode_metrics(b"").unwrap(), vec![]);
    }

    #[test]
    fn garbage_is_invalid_otlp() {
        let good = request(vec![sum_metric("x", 1, true, &[1, 2, 3])]);
        let mut bad_utf8 = request(vec![sum_metric("\u{e9}", 1, true, &[1])]);
        let at = bad_utf8.windows(2).position(|w| w == [0xc3, 0xa9]).unwrap();
        bad_utf8[at] = 0xff;
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("text", b"this is not protobuf at all".to_vec()),
            ("truncated", good[..good.len() - 3].to_vec()),
            ("bad utf-8 name", bad_utf8),
            ("end group without start", vec![0x0c]),
            ("field number zero", vec![0x00, 0x00]),
        ];
        for (name, body) in cases {
            let err = decode_metrics(&body).unwrap_err();
            assert_eq!(err, Rejection::InvalidOtlp, "{name}");
            assert_eq!((err.status(), err.code()), (400, "invalid_request"));
            assert_eq!(err.message(), "Failed to decode OTLP payload");
        }
    }

    #[test]
    fn every_prefix_and_byte_flip_is_ok_or_rejected() {
        let body = request(vec![sum_metric(
            "gen_ai.client.token.usage",
            1,
            true,
            &[1, 2],
        )]);
        for i in 0..body.len() {
            let _ = decode_metrics(&body[..i]);
            for bit in 0..8 {
                let mut b = body.clone();
                b[i] ^= 1 << bit;
                match decode_metrics(&b) {
                    Ok(_) | Err(Rejection::InvalidOtlp) => {}
                    Err(e) => panic!("unexpected {e:?}"),
                }
            }
        }
    }

    #[test]
    fn too_many_points_is_413() {
        let values = vec![1i64; MAX_DATA_POINTS / 2 + 1];
        let body = request(vec![
            sum_metric("a", 1, true, &values),
            sum_metric("b", 1, true, &values),
        ]);
        let err = decode_metrics(&body).unwrap_err();
        assert_eq!(
            err,
            Rejection::TooManyDataPoints {
                limit: MAX_DATA_POINTS
            }
        );
        assert_eq!((err.status(), err.code()), (413, "payload_too_large"));
        let ok = request(vec![sum_metric("a", 1, true, &values)]);
        assert!(decode_metrics(&ok).is_ok());
    }

    #[test]
    fn response_encoding() {
        assert_eq!(encode_response(0, ""), b"\x0a\x00");
        let bytes = encode_response(3, "unsupported metric \"x\"");
        let back = pb::ExportMetricsServiceResponse::decode(&bytes[..]).unwrap();
        let ps = back.partial_success.unwrap();
        assert_eq!(ps.rejected_data_points, 3);
        assert_eq!(ps.error_message, "unsupported metric \"x\"");
    }
}
