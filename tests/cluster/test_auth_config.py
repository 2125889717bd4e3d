"""The client ``authorization`` block read as nats-server 2.15.1 reads it (opts.go
``parseAuthorization``, ``parseUserPermissions``, ``parseAllowResponses``,
``checkPermSubjectArray``, auth.go ``validateNoAuthUser``): configs it accepts start, configs it
refuses stop, with its words where jetraft has them."""

from __future__ import annotations

import pytest

from cluster.config_file import ConfigError, parse_config
from cluster.config_schema import check_config
from cluster.security_config import client_auth_from
from protocol.auth_config import ClientAuthConfig, ResponsePermission, SubjectPermission

NKEY = "UCFIRY65OQE7DFP5KLNS2PF2LVZMUZYJX4OZIEQ36N2IQANUB5XVZ45L"


def _auth(text: str) -> ClientAuthConfig:
    conf = parse_config(text)
    check_config(conf)
    return client_auth_from(conf)


def test_permissions_beside_users_are_the_default_permissions() -> None:
    auth = _auth(
        "authorization { users: [ { user: a, password: a } ], permissions: { publish: x } }\n"
    )
    assert auth.default_permissions is not None
    assert auth.default_permissions.publish == SubjectPermission(allow=("x",))
    with pytest.raises(ConfigError, match="either permissions or default_permissions"):
        _auth(
            "authorization { users: [ { user: a, password: a } ]\n"
            "  permissions: { publish: x }, default_permissions: { publish: y } }\n"
        )


def test_import_export_name_publish_and_subscribe() -> None:
    auth = _auth(
        "authorization { users: [ { user: a, password: a,\n"
        "  permissions: { import: { deny: p }, export: [s] } } ] }\n"
    )
    perms = auth.users[0].permissions
    assert perms is not None
    assert perms.publish == SubjectPermission(deny=("p",))
    assert perms.subscribe == SubjectPermission(allow=("s",))


@pytest.mark.parametrize(
    ("block", "want"),
    [
        ('{ max_msgs: 3, ttl: "1s" }', ResponsePermission(3, 1.0)),
        ('{ max_messages: 4, expiration: "2m" }', ResponsePermission(4, 120.0)),
        ('{ max_responses: -1, expires: "-1s" }', ResponsePermission(-1, -1.0)),
        ('{ max: 0, expires: "0s" }', ResponsePermission(1, 0.0)),  # 0: the defaults
        ("true", ResponsePermission()),
    ],
)
def test_allow_responses_names_and_limits(block: str, want: ResponsePermission) -> None:
    auth = _auth(
        "authorization { users: [ { user: a, password: a,\n"
        f"  permissions: {{ allow_responses: {block} }} }} ] }}\n"
    )
    perms = auth.users[0].permissions
    assert perms is not None and perms.allow_responses == want


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "authorization { users: [ { user: a, password: a,\n"
            "  permissions: { allow_responses: { expires: 5 } } } ] }\n",
            "not a duration string",
        ),
        (
            "authorization { users: [ { user: a, password: a,\n"
            '  permissions: { publish: { deny: ["foo..bar"] } } } ] }\n',
            'subject "foo..bar" is not a valid subject',
        ),
        (
            "authorization { users: [ { user: a, password: a,\n"
            '  permissions: { publish: ["foo q"] } } ] }\n',
            'subject "foo q" is not a valid subject',  # queue entries are for subscribe only
        ),
        (
            "authorization { users: [ { user: a, password: a,\n"
            '  permissions: { subscribe: { deny: ["foo a b"] } } } ] }\n',
            'subject "foo a b" is not a valid subject',
        ),
        (
            "authorization { users: [ { user: a, password: a,\n"
            '  permissions: { subscribe: ["foo.> q.>.x"] } } ] }\n',
            'queue "q.>.x" is not a valid queue',
        ),
        (
            "no_auth_user: a\nauthorization { user: a, password: a }\n",
            'no_auth_user: "a" present, but users/nkeys are not defined',
        ),
    ],
)
def test_configs_nats_server_refuses_are_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _auth(text)


def test_queue_entries_and_nkey_no_auth_user_are_accepted() -> None:
    auth = _auth(
        f"no_auth_user: {NKEY}\n"
        f"authorization {{ users: [ {{ nkey: {NKEY},\n"
        '  permissions: { subscribe: ["foo.* v1.*", "bar q"] } } ] }\n'
    )
    assert auth.no_auth_user == NKEY
    perms = auth.users[0].permissions
    assert perms is not None and perms.subscribe.allow == ("foo.* v1.*", "bar q")
