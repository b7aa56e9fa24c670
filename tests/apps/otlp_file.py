"""An OpenTelemetry span exporter that writes to a file: the test apps that drive their own
routes (python_mongo, python_redis) keep their spans and write them, as one OTLP/protobuf
request encoded by OpenTelemetry's own encoder, when the provider shuts down."""

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


class FileExporter(SpanExporter):
    """Keeps the spans and writes them as one OTLP/protobuf request at shutdown."""

    def __init__(self, path):
        self.path = path
        self.spans = []

    def export(self, spans):
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self):
        with open(self.path, "wb") as out:
            out.write(encode_spans(self.spans).SerializeToString())
