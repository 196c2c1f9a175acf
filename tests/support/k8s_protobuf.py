"""Decode the Kubernetes protobuf wire format for the few kinds helm writes that way (Secret, ConfigMap).

helm (client-go) sends core/v1 objects as ``application/vnd.kubernetes.protobuf``: the 4 bytes ``k8s\\0`` and a
``runtime.Unknown`` message whose ``raw`` field holds the object (k8s.io/api/core/v1/generated.proto,
k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto). This turns such a body into the object's JSON form so the
fake API server can store it. Only the fields those kinds use are mapped; anything else is ignored.
"""
import base64
import datetime

MAGIC = b"k8s\x00"


def _varint(buf, pos):
    shift = result = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def fields(buf):
    """Yield (field number, wire type, value) for one message; length-delimited values are bytes."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            length, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError("unsupported protobuf wire type %d" % wire)
        yield num, wire, value


def _map_entry(buf, value_bytes=False):
    key = value = None
    for num, dummy, val in fields(buf):
        if num == 1:
            key = val.decode("utf-8")
        elif num == 2:
            value = val if value_bytes else val.decode("utf-8")
    if value is None:
        value = b"" if value_bytes else ""
    return key, value


def _time(buf):
    seconds = 0
    for num, dummy, val in fields(buf):
        if num == 1:
            seconds = val
    return datetime.datetime.utcfromtimestamp(seconds).strftime("%Y-%m-%dT%H:%M:%SZ")


def object_meta(buf):
    meta = {}
    names = {1: "name", 2: "generateName", 3: "namespace", 5: "uid", 6: "resourceVersion"}
    for num, dummy, val in fields(buf):
        if num in names:
            meta[names[num]] = val.decode("utf-8")
        elif num == 7:
            meta["generation"] = val
        elif num == 8:
            meta["creationTimestamp"] = _time(val)
        elif num in (11, 12):
            key, value = _map_entry(val)
            meta.setdefault("labels" if num == 11 else "annotations", {})[key] = value
        elif num == 14:
            meta.setdefault("finalizers", []).append(val.decode("utf-8"))
    return meta


def secret(buf):
    obj = {"metadata": {}}
    for num, dummy, val in fields(buf):
        if num == 1:
            obj["metadata"] = object_meta(val)
        elif num == 2:
            key, value = _map_entry(val, value_bytes=True)
            obj.setdefault("data", {})[key] = base64.b64encode(value).decode("ascii")
        elif num == 3:
            obj["type"] = val.decode("utf-8")
        elif num == 4:
            key, value = _map_entry(val)
            obj.setdefault("stringData", {})[key] = value
        elif num == 5:
            obj["immutable"] = bool(val)
    return obj


def configmap(buf):
    obj = {"metadata": {}}
    for num, dummy, val in fields(buf):
        if num == 1:
            obj["metadata"] = object_meta(val)
        elif num == 2:
            key, value = _map_entry(val)
            obj.setdefault("data", {})[key] = value
        elif num == 3:
            key, value = _map_entry(val, value_bytes=True)
            obj.setdefault("binaryData", {})[key] = base64.b64encode(value).decode("ascii")
        elif num == 4:
            obj["immutable"] = bool(val)
    return obj


def delete_options(buf):
    # propagationPolicy = 4, gracePeriodSeconds = 1; the fake deletes at once whatever they say.
    out = {}
    for num, dummy, val in fields(buf):
        if num == 4:
            out["propagationPolicy"] = val.decode("utf-8")
    return out


DECODERS = {("v1", "Secret"): secret, ("v1", "ConfigMap"): configmap, ("v1", "DeleteOptions"): delete_options}


def decode(body):
    """Return the JSON form of a protobuf-encoded object, or raise ValueError for kinds not mapped here."""
    if not body.startswith(MAGIC):
        raise ValueError("not a Kubernetes protobuf body (no k8s\\0 prefix)")
    api_version = kind = raw = None
    for num, dummy, val in fields(body[len(MAGIC):]):
        if num == 1:
            for tnum, dummy, tval in fields(val):
                if tnum == 1:
                    api_version = tval.decode("utf-8")
                elif tnum == 2:
                    kind = tval.decode("utf-8")
        elif num == 2:
            raw = val
    decoder = DECODERS.get((api_version, kind))
    if decoder is None:
        raise ValueError("protobuf body of %s %s is not supported by the fake API server" % (api_version, kind))
    obj = decoder(raw or b"")
    obj["apiVersion"], obj["kind"] = api_version, kind
    return obj
