"""ramstore's Redis protocol front end through a real client library (redis-py).

Run by the cargo test `redis_py_client_library` (crates/cli/tests/resp.rs), which
starts `ramstore dev --resp-port P` and sets RESP_PORT. Every supported command is
exercised over RESP2 and RESP3 clients, with and without pipelines.

    RESP_PORT=6380 python3 tests/python/test_resp.py
"""

import os
import sys
import time
import unittest

import redis

PORT = int(os.environ.get("RESP_PORT", "6379"))


def client(protocol=2, db=0):
    return redis.Redis(host="127.0.0.1", port=PORT, protocol=protocol, db=db,
                       socket_timeout=30)


class Resp2Commands(unittest.TestCase):
    protocol = 2

    def setUp(self):
        self.r = client(self.protocol)
        self.p = f"t{self.protocol}:{self._testMethodName}:"

    def tearDown(self):
        self.r.close()

    def k(self, name):
        return self.p + name

    def test_connection_commands(self):
        self.assertTrue(self.r.ping())
        self.assertEqual(self.r.echo("hi"), b"hi")
        # No password configured: Redis's error for `AUTH password`, which redis-py
        # knows; the default user takes any password when named.
        with self.assertRaises(redis.exceptions.AuthenticationError):
            self.r.execute_command("AUTH", "whatever")
        self.assertEqual(self.r.execute_command("AUTH", "default", "whatever"), True)
        self.r.client_setname("py-test")
        # redis-py decodes the name over RESP2 only.
        self.assertIn(self.r.client_getname(), ("py-test", b"py-test"))
        self.assertIsInstance(self.r.client_id(), int)
        self.assertGreaterEqual(self.r.execute_command("COMMAND COUNT"), 32)
        self.assertEqual(self.r.config_get("databases"), {"databases": "16"})

    def test_set_get_and_options(self):
        k = self.k("k")
        self.assertTrue(self.r.set(k, "v1"))
        self.assertEqual(self.r.get(k), b"v1")
        self.assertIsNone(self.r.get(self.k("missing")))
        self.assertIsNone(self.r.set(k, "x", nx=True))
        self.assertTrue(self.r.set(self.k("new"), "x", nx=True))
        self.assertIsNone(self.r.set(self.k("absent"), "x", xx=True))
        self.assertTrue(self.r.set(k, "v2", xx=True))
        self.assertEqual(self.r.set(k, "v3", get=True), b"v2")
        self.assertEqual(self.r.getset(k, "v4"), b"v3")
        self.assertTrue(self.r.setnx(self.k("nx"), "1"))
        self.assertFalse(self.r.setnx(self.k("nx"), "2"))
        self.assertEqual(self.r.get(k), b"v4")

    def test_expiry(self):
        k, n = self.k("k"), self.k("n")
        self.assertTrue(self.r.set(k, "v", ex=100))
        self.assertEqual(self.r.ttl(k), 100)
        self.assertTrue(99_000 <= self.r.pttl(k) <= 100_000)
        self.assertTrue(self.r.set(k, "w", keepttl=True))
        self.assertEqual(self.r.ttl(k), 100)
        self.assertTrue(self.r.persist(k))
        self.assertEqual(self.r.ttl(k), -1)
        self.assertFalse(self.r.persist(k))
        self.assertEqual(self.r.ttl(self.k("missing")), -2)
        self.assertTrue(self.r.expire(k, 50, nx=True))
        self.assertFalse(self.r.expire(k, 60, lt=True))
        self.assertTrue(self.r.expire(k, 60, gt=True))
        self.assertEqual(self.r.ttl(k), 60)
        self.assertTrue(self.r.pexpireat(k, 99_999_999_999_999))
        self.assertEqual(self.r.pexpiretime(k), 99_999_999_999_999)
        self.assertEqual(self.r.expiretime(k), 99_999_999_999)
        self.assertTrue(self.r.setex(n, 100, "1"))
        self.assertEqual(self.r.incr(n), 2)
        self.assertEqual(self.r.ttl(n), 100)
        self.assertTrue(self.r.psetex(n, 100_000, "1"))
        self.assertEqual(self.r.getex(n, ex=200), b"1")
        self.assertEqual(self.r.ttl(n), 200)
        self.assertEqual(self.r.getex(n, persist=True), b"1")
        self.assertEqual(self.r.ttl(n), -1)
        with self.assertRaises(redis.ResponseError) as e:
            self.r.set(k, "v", ex=0)
        self.assertEqual(str(e.exception), "invalid expire time in 'set' command")
        # Expired: absent at once.
        self.assertTrue(self.r.set(k, "v", px=100))
        time.sleep(0.3)
        self.assertIsNone(self.r.get(k))
        self.assertEqual(self.r.exists(k), 0)
        self.assertTrue(self.r.set(k, "v"))
        self.assertTrue(self.r.expire(k, -1))
        self.assertIsNone(self.r.get(k))

    def test_multi_key(self):
        a, b = self.k("a"), self.k("b")
        self.assertTrue(self.r.mset({a: "1", b: "2"}))
        self.assertEqual(self.r.mget([a, b, self.k("nope")]), [b"1", b"2", None])
        self.assertEqual(self.r.exists(a, b, self.k("nope")), 2)
        self.assertEqual(self.r.delete(a, self.k("nope")), 1)
        self.assertEqual(self.r.unlink(b), 1)
        self.assertEqual(self.r.exists(a, b), 0)

    def test_strings_and_counters(self):
        s, c, f = self.k("s"), self.k("c"), self.k("f")
        self.r.set(s, "ab")
        self.assertEqual(self.r.strlen(s), 2)
        self.assertEqual(self.r.append(s, "cd"), 4)
        self.assertEqual(self.r.get(s), b"abcd")
        self.assertEqual(self.r.incr(c), 1)
        self.assertEqual(self.r.incrby(c, 9), 10)
        self.assertEqual(self.r.decr(c), 9)
        self.assertEqual(self.r.decrby(c, 4), 5)
        self.assertEqual(self.r.incrbyfloat(f, 0.5), 0.5)
        self.assertEqual(self.r.incrbyfloat(f, 2), 2.5)
        with self.assertRaises(redis.ResponseError):
            self.r.incr(s)

    def test_versions(self):
        k = self.k("v")
        self.r.set(k, "one")
        value, version = self.r.execute_command("RS.GETV", k)
        self.assertEqual(value, b"one")
        self.assertGreater(version, 0)
        self.assertIsNone(self.r.execute_command("RS.CAS", k, version + 1000, "x"))
        new = self.r.execute_command("RS.CAS", k, version, "two")
        self.assertGreater(new, version)
        self.assertEqual(self.r.get(k), b"two")
        self.assertIsNone(self.r.execute_command("RS.GETV", self.k("absent")))

    def test_pipeline_in_order(self):
        pipe = self.r.pipeline(transaction=False)
        for i in range(300):
            pipe.set(self.k(f"p{i}"), f"v{i}")
            pipe.get(self.k(f"p{i}"))
            pipe.incr(self.k("count"))
        results = pipe.execute()
        self.assertEqual(len(results), 900)
        for i in range(300):
            self.assertEqual(results[3 * i], True)
            self.assertEqual(results[3 * i + 1], f"v{i}".encode())
            self.assertEqual(results[3 * i + 2], i + 1)

    def test_pipeline_errors_do_not_stop_it(self):
        pipe = self.r.pipeline(transaction=False)
        pipe.set(self.k("e"), "text")
        pipe.incr(self.k("e"))
        pipe.get(self.k("e"))
        results = pipe.execute(raise_on_error=False)
        self.assertTrue(results[0])
        self.assertIsInstance(results[1], redis.ResponseError)
        self.assertEqual(results[2], b"text")

    def test_unknown_command_keeps_connection(self):
        with self.assertRaises(redis.ResponseError) as e:
            self.r.execute_command("NO.SUCH", "x")
        self.assertIn("unknown command", str(e.exception))
        with self.assertRaises(redis.ResponseError) as e:
            self.r.execute_command("GET")
        self.assertIn("wrong number of arguments", str(e.exception))
        self.assertTrue(self.r.ping())

    def test_info_sections(self):
        info = self.r.info("all")
        for field in ("redis_version", "connected_clients", "used_memory",
                      "total_commands_processed"):
            self.assertIn(field, info)
        self.assertGreater(info["total_commands_processed"], 0)


class Resp3Commands(Resp2Commands):
    protocol = 3

    def test_hello_switches_to_resp3(self):
        hello = self.r.execute_command("HELLO", 3)
        self.assertEqual(hello[b"proto"], 3)
        self.assertEqual(hello[b"mode"], b"standalone")


class Keyspace(unittest.TestCase):
    """SCAN, KEYS, DBSIZE and FLUSHDB in a database of its own."""

    def test_scan_keys_dbsize_flushdb(self):
        r = client(2, db=5)
        r.flushdb()
        self.assertEqual(r.dbsize(), 0)
        r.mset({f"key:{i}": str(i) for i in range(250)})
        r.set("other", "x")
        self.assertEqual(r.dbsize(), 251)
        self.assertEqual(len(r.keys("key:*")), 250)
        self.assertEqual(sorted(r.scan_iter(match="key:1?", count=7)),
                         sorted(f"key:1{i}".encode() for i in range(10)))
        self.assertEqual(len(list(r.scan_iter(count=20))), 251)
        self.assertTrue(r.flushdb())
        self.assertEqual(r.dbsize(), 0)
        r.close()

    def test_select_isolates_databases(self):
        r6, r7 = client(2, db=6), client(3, db=7)
        r6.set("same", "six")
        r7.set("same", "seven")
        self.assertEqual(r6.get("same"), b"six")
        self.assertEqual(r7.get("same"), b"seven")
        r6.close()
        r7.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
