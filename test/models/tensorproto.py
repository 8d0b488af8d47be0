"""The few onnx.TensorProto fields the model tests read and write (dims, data_type, name,
raw_data, float_data), in the standard library: lit's python has no onnx."""
import struct
import sys

FLOAT, INT64 = 1, 7


def varint(data, pos):
    value, shift = 0, 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def read_tensor(path):
    """(name, dims, data_type, raw_data, float_data) of the TensorProto in `path`."""
    data = open(path, "rb").read()
    name, dims, dtype, raw, floats, pos = "", [], None, b"", [], 0
    while pos < len(data):
        key, pos = varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(data, pos)
            if field == 1:
                dims.append(value)
            elif field == 2:
                dtype = value
        elif wire == 2:
            length, pos = varint(data, pos)
            chunk = data[pos:pos + length]
            pos += length
            if field == 1:  # packed dims
                p = 0
                while p < len(chunk):
                    value, p = varint(chunk, p)
                    dims.append(value)
            elif field == 8:
                name = chunk.decode()
            elif field == 9:
                raw = chunk
            elif field == 4:
                floats = list(struct.unpack(f"<{len(chunk) // 4}f", chunk))
        elif wire == 5:
            floats.append(struct.unpack("<f", data[pos:pos + 4])[0])
            pos += 4
        elif wire == 1:
            pos += 8
        else:
            sys.exit(f"FAIL: {path}: unexpected protobuf wire type {wire}")
    return name, dims, dtype, raw, floats


def read_float_tensor(path):
    """(dims, values) of a float TensorProto."""
    _, dims, dtype, raw, floats = read_tensor(path)
    if dtype != FLOAT:
        sys.exit(f"FAIL: {path}: expected a float tensor, got TensorProto type {dtype}")
    if raw:
        floats = list(struct.unpack(f"<{len(raw) // 4}f", raw))
    return dims, floats


def _varint_bytes(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if not value:
            out.append(byte)
            return bytes(out)
        out.append(byte | 0x80)


def write_tensor(path, name, dims, dtype, raw):
    out = bytearray()
    for d in dims:
        out += _varint_bytes(1 << 3) + _varint_bytes(d)
    out += _varint_bytes(2 << 3) + _varint_bytes(dtype)
    encoded = name.encode()
    out += _varint_bytes((8 << 3) | 2) + _varint_bytes(len(encoded)) + encoded
    out += _varint_bytes((9 << 3) | 2) + _varint_bytes(len(raw)) + raw
    open(path, "wb").write(bytes(out))
