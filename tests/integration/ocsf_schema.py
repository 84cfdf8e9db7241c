"""What the OCSF schema (github.com/ocsf/ocsf-schema, tag 1.8.0) asks of the two classes sluice
writes, HTTP Activity (4002) and Network Activity (4001), and of the objects in them: the
attributes each may have, which are required, their types and enumerations, and the schema's
"at least one of" constraints. Taken by hand from the schema's events/base_event.json,
events/network/{network,network_activity,http_activity}.json, profiles/security_control.json,
objects/*.json and dictionary.json; where an older 1.x (1.3.0) was stricter (action_id,
dst_endpoint, http_request and http_response, product.vendor_name and observable.name required)
that is checked too, so the events load into consumers of either.

validate(event) returns the list of problems (empty: valid)."""
import ipaddress

VERSION = "1.8.0"

# Attributes of base_event and its profiles (security_control, host, cloud, osint, datetime).
BASE = {
    "activity_id": "int", "activity_name": "str", "category_uid": "int", "category_name": "str",
    "class_uid": "int", "class_name": "str", "count": "int", "duration": "long", "end_time": "timestamp",
    "enrichments": "list", "message": "str", "metadata": "metadata", "observables": "observable[]",
    "raw_data": "str", "raw_data_hash": "object", "raw_data_size": "long", "severity": "str",
    "severity_id": "int", "start_time": "timestamp", "status": "str", "status_code": "str",
    "status_detail": "str", "status_id": "int", "time": "timestamp", "timezone_offset": "int",
    "type_name": "str", "type_uid": "long", "unmapped": "object",
    # security_control profile
    "action": "str", "action_id": "int", "disposition": "str", "disposition_id": "int",
    "firewall_rule": "firewall_rule", "policy": "object", "is_alert": "bool", "confidence_id": "int",
    "confidence": "str", "confidence_score": "int", "attacks": "list", "authorizations": "list",
    "malware": "list", "malware_scan_info": "object", "risk_details": "str", "risk_level": "str",
    "risk_level_id": "int", "risk_score": "int",
    # host and cloud profiles
    "device": "object", "actor": "actor", "cloud": "object", "api": "object", "osint": "list",
}
# events/network/network.json (with its network_proxy and load_balancer profiles).
NETWORK = {
    "connection_info": "network_connection_info", "dst_endpoint": "network_endpoint",
    "src_endpoint": "network_endpoint", "proxy": "network_endpoint", "traffic": "network_traffic",
    "app_name": "str", "app_protocol_name": "str", "cumulative_traffic": "network_traffic",
    "ja4_fingerprint_list": "list", "network_observation_point": "network_endpoint",
    "observation_point": "str", "observation_point_id": "int", "packet_list": "list", "tls": "object",
    "proxy_connection_info": "network_connection_info", "proxy_tls": "object", "proxy_traffic": "network_traffic",
    "proxy_endpoint": "network_endpoint", "proxy_http_request": "http_request",
    "proxy_http_response": "http_response", "load_balancer": "object",
}
CLASSES = {
    4001: {"name": "Network Activity", "attributes": dict(BASE, **NETWORK, is_src_dst_assignment_known="bool", url="url"),
           "activities": {1: "Open", 2: "Close", 3: "Reset", 4: "Fail", 5: "Refuse", 6: "Traffic", 7: "Listen"}},
    4002: {"name": "HTTP Activity",
           "attributes": dict(BASE, **NETWORK, http_cookies="list", http_request="http_request",
                              http_response="http_response", http_status="int", file="object", trace="object"),
           "activities": {1: "Connect", 2: "Delete", 3: "Get", 4: "Head", 5: "Options", 6: "Post", 7: "Put",
                          8: "Trace", 9: "Patch"}},
}
# Required in 1.8.0, plus what 1.3.0 also required.
REQUIRED = {"activity_id", "category_uid", "class_uid", "metadata", "severity_id", "time", "type_uid", "action_id"}
REQUIRED_BY_CLASS = {4001: {"dst_endpoint"}, 4002: {"dst_endpoint", "http_request", "http_response"}}

OBJECTS = {
    "metadata": ({"product", "version"}, {
        "product": "product", "version": "str", "log_name": "str", "original_time": "str", "tenant_uid": "str",
        "reporter": "object", "uid": "str", "correlation_uid": "str", "event_code": "str", "log_provider": "str",
        "log_source": "str", "log_format": "str", "log_level": "str", "log_version": "str",
        "original_event_uid": "str", "source": "str", "type": "str", "profiles": "str[]", "labels": "str[]",
        "logged_time": "timestamp", "processed_time": "timestamp", "modified_time": "timestamp",
        "transmit_time": "timestamp", "sequence": "int", "is_truncated": "bool", "extension": "object",
        "extensions": "list", "loggers": "list", "tags": "list"}),
    "product": ({"vendor_name"}, {"name": "str", "uid": "str", "vendor_name": "str", "version": "str",
                                  "cpe_name": "str", "lang": "str", "path": "str", "url_string": "str",
                                  "feature": "object"}),
    "network_endpoint": (set(), {
        "hostname": "str", "ip": "ip", "name": "str", "uid": "str", "instance_uid": "str", "interface_name": "str",
        "interface_uid": "str", "owner": "object", "type_id": "int", "type": "str", "domain": "str", "mac": "str",
        "location": "object", "os": "object", "hw_info": "object", "agent_list": "list", "subnet_uid": "str",
        "vlan_uid": "str", "vpc_uid": "str", "zone": "str", "port": "port", "svc_name": "str",
        "autonomous_system": "object", "intermediate_ips": "list", "isp": "str", "isp_org": "str",
        "network_scope": "str", "network_scope_id": "int", "proxy_endpoint": "object", "fingerprints": "list"}),
    "http_request": (set(), {"http_headers": "list", "http_method": "str", "url": "url", "user_agent": "str",
                             "version": "str", "args": "str", "referrer": "str", "uid": "str", "length": "int",
                             "body_length": "int", "x_forwarded_for": "list"}),
    "http_response": ({"code"}, {"code": "int", "http_headers": "list", "status": "str", "message": "str",
                                 "content_type": "str", "latency": "int", "length": "int", "body_length": "int"}),
    "url": (set(), {"url_string": "str", "scheme": "str", "hostname": "str", "port": "port", "path": "str",
                    "query_string": "str", "category_ids": "list", "categories": "list", "domain": "str",
                    "subdomain": "str", "resource_type": "str"}),
    "network_connection_info": ({"direction_id"}, {
        "direction_id": "int", "boundary_id": "int", "protocol_name": "str", "protocol_num": "int",
        "protocol_ver_id": "int", "uid": "str", "direction": "str", "boundary": "str", "protocol_ver": "str",
        "tcp_flags": "int", "flag_history": "str", "community_uid": "str", "session": "object"}),
    "network_traffic": (set(), {"bytes": "long", "packets": "long", "bytes_in": "long", "bytes_out": "long",
                                "packets_in": "long", "packets_out": "long", "bytes_missed": "long",
                                "chunks": "long", "chunks_in": "long", "chunks_out": "long",
                                "start_time": "timestamp", "end_time": "timestamp", "timespan": "object"}),
    "firewall_rule": (set(), {"name": "str", "uid": "str", "category": "str", "desc": "str", "type": "str",
                              "version": "str", "condition": "str", "match_location": "str",
                              "sensitivity": "str", "match_details": "str[]", "duration": "long",
                              "rate_limit": "int"}),
    "actor": (set(), {"process": "object", "user": "user", "app_name": "str", "app_uid": "str",
                      "invoked_by": "str", "authorizations": "list", "idp": "object", "session": "object"}),
    "user": (set(), {"name": "str", "uid": "str", "type_id": "int", "type": "str", "has_mfa": "bool",
                     "account": "object", "domain": "str", "email_addr": "str", "full_name": "str",
                     "display_name": "str", "groups": "group[]", "org": "object", "uid_alt": "str",
                     "credential_uid": "str"}),
    "group": (set(), {"name": "str", "uid": "str", "desc": "str", "domain": "str", "type": "str",
                      "privileges": "str[]"}),
    "observable": ({"type_id", "name"}, {"type_id": "int", "name": "str", "value": "str", "type": "str",
                                         "type_uid": "long", "event_uid": "str", "reputation": "object"}),
}
AT_LEAST_ONE = {
    "network_endpoint": {"ip", "uid", "name", "hostname", "svc_name", "instance_uid", "interface_uid",
                         "interface_name", "domain"},
    "url": {"url_string", "path"},
    "firewall_rule": {"name", "uid"},
    "actor": {"process", "user", "invoked_by", "session", "app_name", "app_uid"},
    "user": {"account", "name", "uid"},
    "group": {"name", "uid"},
}
ENUMS = {
    "severity_id": {0, 1, 2, 3, 4, 5, 6, 99}, "status_id": {0, 1, 2, 99},
    "action_id": {0, 1, 2, 3, 4, 99},
    "disposition_id": set(range(0, 28)) | {99},
    "direction_id": {0, 1, 2, 3, 4, 99},
    "http_method": {"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"},
}


def _check_value(kind, value, where, problems):
    if kind.endswith("[]"):
        if not isinstance(value, list):
            problems.append("%s: expected a list" % where)
            return
        for i, v in enumerate(value):
            _check_value(kind[:-2], v, "%s[%d]" % (where, i), problems)
        return
    if kind == "str":
        ok = isinstance(value, str)
    elif kind in ("int", "long"):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "timestamp":  # milliseconds since the epoch: between 2020 and 2100
        ok = isinstance(value, int) and 1_577_836_800_000 <= value <= 4_102_444_800_000
    elif kind == "port":
        ok = isinstance(value, int) and 0 <= value <= 65535
    elif kind == "ip":
        try:
            ipaddress.ip_address(value)
            ok = True
        except ValueError:
            ok = False
    elif kind in ("object", "list"):
        ok = isinstance(value, dict if kind == "object" else list)
    elif kind in OBJECTS:
        _check_object(kind, value, where, problems)
        return
    else:
        raise AssertionError("unknown kind " + kind)
    if not ok:
        problems.append("%s: %r is not of type %s" % (where, value, kind))


def _check_object(name, obj, where, problems):
    if not isinstance(obj, dict):
        problems.append("%s: expected an object (%s)" % (where, name))
        return
    required, attributes = OBJECTS[name]
    for key in required - set(obj):
        problems.append("%s: required attribute %s missing" % (where, key))
    for key, value in obj.items():
        if key not in attributes:
            problems.append("%s: %s is not an attribute of %s" % (where, key, name))
            continue
        _check_value(attributes[key], value, where + "." + key, problems)
        if key in ENUMS and value not in ENUMS[key]:
            problems.append("%s.%s: %r is not in the enumeration" % (where, key, value))
    if name in AT_LEAST_ONE and not AT_LEAST_ONE[name] & set(obj):
        problems.append("%s: needs at least one of %s" % (where, sorted(AT_LEAST_ONE[name])))


def validate(event):
    problems = []
    cls = CLASSES.get(event.get("class_uid"))
    if cls is None:
        return ["class_uid %r is not 4001 or 4002" % event.get("class_uid")]
    for key in REQUIRED | REQUIRED_BY_CLASS[event["class_uid"]]:
        if key not in event:
            problems.append("required attribute %s missing" % key)
    for key, value in event.items():
        kind = cls["attributes"].get(key)
        if kind is None:
            problems.append("%s is not an attribute of %s" % (key, cls["name"]))
            continue
        _check_value(kind, value, key, problems)
        if key in ENUMS and value not in ENUMS[key]:
            problems.append("%s: %r is not in the enumeration" % (key, value))
    if event.get("category_uid") != 4:
        problems.append("category_uid must be 4 (Network Activity)")
    if event.get("activity_id") not in set(cls["activities"]) | {0, 99}:
        problems.append("activity_id %r is not one of %s's" % (event.get("activity_id"), cls["name"]))
    if event.get("type_uid") != event.get("class_uid", 0) * 100 + event.get("activity_id", 0):
        problems.append("type_uid must be class_uid * 100 + activity_id")
    if event.get("metadata", {}).get("version") != VERSION:
        problems.append("metadata.version must be the schema version %s" % VERSION)
    if event["class_uid"] == 4002 and not {"http_request", "http_response"} & set(event):
        problems.append("HTTP Activity needs http_request or http_response")
    if not {"dst_endpoint", "src_endpoint"} & set(event):
        problems.append("a network event needs dst_endpoint or src_endpoint")
    return problems
