//! What a log line formatter writes, captured through a real `tracing` pipeline: the unit tests
//! of the klog and JSON formats emit events and read back the bytes a subscriber with that
//! formatter writes.

use std::sync::{Arc, Mutex};

use tracing::Level;
use tracing_subscriber::Registry;
use tracing_subscriber::fmt::format::{DefaultFields, FormatEvent};

/// The text a subscriber formatting with `format` writes for what `emit` logs (every level).
pub fn logged<F>(format: F, emit: impl FnOnce()) -> String
where
    F: FormatEvent<Registry, DefaultFields> + Send + Sync + 'static,
{
    let buf = Arc::new(Mutex::new(Vec::new()));
    let sink = buf.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(Level::TRACE)
        .event_format(format)
        .with_writer(move || Sink(sink.clone()))
        .finish();
    tracing::subscriber::with_default(subscriber, emit);
    let bytes = buf.lock().expect("the sink's lock").clone();
    String::from_utf8(bytes).expect("UTF-8 log lines")
}

/// The subscriber's writer: appends to the shared buffer.
struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("the sink's lock").extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
