#!/usr/bin/env python3
"""Unit tests of the harness's pure parts (no namespaces): reading `choice` predictions of
several plausible shapes, the per-cell summary (medians, best, auto's ratio, prediction
error), the cell selection and the smoke check's failures. `python3 tests/field/test_field.py`."""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import field  # noqa: E402


def run(cell, protocol, wall, ok=True, **kw):
    net, work = cell.split("/")
    r = {"cell": cell, "network": net, "workload": work, "protocol": protocol, "ok": ok, "wall_s": wall,
         "client_s": wall * 0.9, "bytes_sent": 10, "bytes_received": 20, "matches": 5, "expected_matches": 5,
         "protocol_used": protocol, "chosen": protocol, "cache": "cold", "set_from_cache": False,
         "predictions": {}, "error": None if ok else "boom"}
    r.update(kw)
    return r


class Predictions(unittest.TestCase):
    def test_list_of_protocols_in_ms(self):
        rep = {"protocol": "dh-psi", "choice": {"protocol": "ot-psi", "predictions": [
            {"protocol": "dh-psi", "time_ms": 1500, "bytes_up": 100, "bytes_down": 200},
            {"protocol": "ot-psi", "time_ms": 900.0, "bytes_up": 300, "bytes_down": 400}]}}
        self.assertEqual(field.predictions(rep), {"dh": {"time_s": 1.5, "bytes": 300}, "ot": {"time_s": 0.9, "bytes": 700}})
        self.assertEqual(field.chosen(rep), "ot")

    def test_total_preferred_over_parts(self):
        # The shape of the draft `psi match --protocol auto` report (components, then the total).
        rep = {"protocol": "ot-psi", "choice": {"policy": "fastest", "protocol": "ot-psi", "overhead_ms": 12.0,
               "predictions": [{"protocol": "dh-psi", "requests": 5, "bytes_up": 1, "bytes_down": 2,
                                "network_ms": 400.0, "client_ms": 300.0, "server_ms": 100.0, "total_ms": 800.0},
                               {"protocol": "ot-psi", "requests": 6, "bytes_up": 3, "bytes_down": 4,
                                "network_ms": 500.0, "client_ms": 50.0, "server_ms": 50.0, "total_ms": 600.0}]}}
        self.assertEqual(field.predictions(rep), {"dh": {"time_s": 0.8, "bytes": 3}, "ot": {"time_s": 0.6, "bytes": 7}})
        self.assertEqual(field.chosen(rep), "ot")

    def test_map_keyed_by_protocol_in_seconds(self):
        rep = {"protocol": "dh", "choice": {"chosen": "dh", "predicted": {
            "dh": {"seconds": 2.0, "bytes": 5}, "cm20-psi": {"total_s": 3.0}}}}
        self.assertEqual(field.predictions(rep), {"dh": {"time_s": 2.0, "bytes": 5}, "cm20": {"time_s": 3.0, "bytes": None}})
        self.assertEqual(field.chosen(rep), "dh")

    def test_nested_time_object(self):
        rep = {"choice": {"protocol": "ot", "predictions": [{"name": "ot", "time": {"total_ms": 250}}]}}
        self.assertEqual(field.predictions(rep)["ot"]["time_s"], 0.25)

    def test_no_choice(self):
        rep = {"protocol": "ot-psi", "bytes_sent": 1}
        self.assertEqual(field.predictions(rep), {})
        self.assertEqual(field.chosen(rep), "ot")


class Calibration(unittest.TestCase):
    def test_the_best_transfer_each_way_and_the_lowest_rtt(self):
        # A CI run's smoke check once saw 4G's 5 Mbit/s uplink at 3.73 from one transfer,
        # outside the check's 25%: a busy machine only slows a transfer.
        m = field.best_of([
            {"rtt_ms": 62.0, "down_mbit": 19.1, "up_mbit": 3.73, "down_bytes": 1, "up_bytes": 2},
            {"rtt_ms": 61.1, "down_mbit": 18.7, "up_mbit": 4.81, "down_bytes": 1, "up_bytes": 2},
        ])
        self.assertEqual((m["rtt_ms"], m["down_mbit"], m["up_mbit"]), (61.1, 19.1, 4.81))
        self.assertEqual((m["down_bytes"], m["transfers"]), (1, 2))


class Summary(unittest.TestCase):
    def test_median_best_ratio_and_error(self):
        preds = {"dh": {"time_s": 1.2, "bytes": 1}, "ot": {"time_s": 3.0, "bytes": 1}}
        doc = {"protocols": ["dh", "ot", "auto"], "runs": [
            run("4g/w", "dh", 1.0), run("4g/w", "dh", 3.0), run("4g/w", "dh", 2.0),
            run("4g/w", "ot", 2.5), run("4g/w", "ot", 0.1, ok=False),
            run("4g/w", "auto", 2.2, chosen="dh", predictions=preds)]}
        [c] = field.summarize(doc)
        self.assertEqual(c["best"], "dh")
        self.assertEqual(c["runs"]["dh"]["wall_s"], 2.0)
        self.assertEqual((c["runs"]["ot"]["n_ok"], c["runs"]["ot"]["n_failed"]), (1, 1))
        self.assertAlmostEqual(c["ratio"], 1.1)
        # Against the client's own total (0.9 x wall here) of the median run.
        self.assertAlmostEqual(c["errors"]["dh"], 1.2 / 1.8 - 1)
        self.assertAlmostEqual(c["errors"]["ot"], 3.0 / 2.25 - 1)
        self.assertEqual(c["choice"], "dh")

    def test_first_and_warm_automatic_runs_each_get_their_ratio(self):
        doc = {"protocols": ["dh", "ot", "auto", "auto-warm"], "runs": [
            run("4g/w", "dh", 2.0), run("4g/w", "ot", 1.0),
            run("4g/w", "auto", 1.3, chosen="ot"), run("4g/w", "auto-warm", 1.05, chosen="ot")]}
        [c] = field.summarize(doc)
        # auto-warm is not a forced protocol: the best stays OT-PSI's 1.0 s.
        self.assertEqual(c["best"], "ot")
        self.assertAlmostEqual(c["ratios"]["auto"], 1.3)
        self.assertAlmostEqual(c["ratios"]["auto-warm"], 1.05)
        self.assertEqual(c["choices"], {"auto": "ot", "auto-warm": "ot"})
        self.assertAlmostEqual(c["ratio"], 1.3)

    def test_all_failed(self):
        [c] = field.summarize({"protocols": ["dh"], "runs": [run("3g/w", "dh", 1, ok=False)]})
        self.assertIsNone(c["best"])
        self.assertIsNone(c["ratio"])


class Cells(unittest.TestCase):
    def test_selection_groups_by_registry(self):
        grid = field.load_json(field.GRID)
        cells = field.select_cells(grid, "3g/unb-1e6-warm,4g/bal-2^10,lan/unb-1e5-cold,lan/unb-1e6-cold")
        self.assertEqual([f"{n['name']}/{w['name']}" for n, w in cells],
                         ["4g/bal-2^10", "lan/unb-1e5-cold", "lan/unb-1e6-cold", "3g/unb-1e6-warm"])
        self.assertEqual(len(field.select_cells(grid, "all")), len(grid["networks"]) * len(grid["workloads"]))
        self.assertEqual(len(field.select_cells(grid, "*/bal-2^10,3g/*,3g/bal-2^10")),
                         len(grid["networks"]) + len(grid["workloads"]) - 1)
        with self.assertRaises(SystemExit):
            field.select_cells(grid, "moon/bal-2^10")

    def test_contacts_have_exactly_the_registered_matches(self):
        w = {"client": 1000, "registry": 100000, "matches": 100}
        reg = {field.phone(202, k) for k in range(w["registry"])}
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "c.csv")
            field.contacts_csv(p, w)
            lines = open(p).read().split()
        self.assertEqual(len(lines), 1000)
        self.assertEqual(len(set(lines)), 1000)
        self.assertEqual(sum(x in reg for x in lines), 100)


class Merge(unittest.TestCase):
    def test_runs_concatenate_and_medians_span_files(self):
        a = {"started": "2026-01-02", "finished": "2026-01-02", "protocols": ["dh", "ot"], "calibration": {"4g": {"x": 1}},
             "runs": [run("4g/w", "dh", 1.0), run("4g/w", "ot", 5.0)]}
        b = {"started": "2026-01-01", "finished": "2026-01-03", "protocols": ["dh", "ot", "auto"], "calibration": {"3g": {"x": 2}},
             "runs": [run("4g/w", "dh", 3.0), run("4g/w", "dh", 2.0), run("4g/w", "auto", 2.0)]}
        with tempfile.TemporaryDirectory() as d:
            paths = [os.path.join(d, n) for n in ("a.json", "b.json", "m.json")]
            for path, doc in zip(paths, (a, b)):
                field.save(path, doc)
            field.cmd_merge(type("A", (), {"results": paths[:2], "out": paths[2]})())
            m = field.load_json(paths[2])
        self.assertEqual(len(m["runs"]), 5)
        self.assertEqual(m["protocols"], ["dh", "ot", "auto"])
        self.assertEqual((m["started"], m["finished"]), ("2026-01-01", "2026-01-03"))
        self.assertEqual(set(m["calibration"]), {"4g", "3g"})
        [c] = field.summarize(m)
        self.assertEqual(c["runs"]["dh"]["wall_s"], 2.0)
        self.assertEqual(c["ratio"], 1.0)


class Check(unittest.TestCase):
    def check(self, doc):
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(doc, f)
        try:
            return field.cmd_check(type("A", (), {"results": f.name, "grid": field.GRID})())
        finally:
            os.remove(f.name)

    def doc(self, **kw):
        cal = {"4g": {"rtt_ms": 61, "expected_rtt_ms": 60, "down_mbit": 19.1, "up_mbit": 4.8}}
        d = {"protocols": ["dh", "ot"], "calibration": cal, "runs": [run("4g/bal-2^10", "dh", 0.8)]}
        d.update(kw)
        return d

    def test_good_results_pass(self):
        self.assertEqual(self.check(self.doc()), 0)

    def test_each_problem_fails(self):
        bad = [
            self.doc(runs=[run("4g/bal-2^10", "dh", 0.8, matches=4)]),
            self.doc(runs=[run("4g/bal-2^10", "dh", 0.05)]),
            self.doc(runs=[run("4g/bal-2^10", "dh", 0.8, ok=False)]),
            self.doc(runs=[run("4g/bal-2^10", "dh", 0.8, bytes_received=0)]),
            self.doc(runs=[run("4g/bal-2^10", "dh", 0.8, protocol_used="ot")]),
            self.doc(runs=[run("4g/bal-2^10", "dh", 0.8, cache="warm")]),
            self.doc(runs=[run("4g/bal-2^10", "auto", 0.8, chosen="xyz")]),
            self.doc(runs=[]),
            self.doc(calibration={"4g": {"rtt_ms": 61, "expected_rtt_ms": 60, "down_mbit": 30, "up_mbit": 4.8}}),
            self.doc(calibration={"4g": {"rtt_ms": 120, "expected_rtt_ms": 60, "down_mbit": 19, "up_mbit": 4.8}}),
            self.doc(calibration={"4g": {"rtt_ms": 1, "expected_rtt_ms": 60, "down_mbit": 19, "up_mbit": 4.8}}),
            self.doc(calibration={"4g": {"rtt_ms": 61, "expected_rtt_ms": 60, "down_mbit": 19, "up_mbit": 2.0}}),
        ]
        for d in bad:
            self.assertEqual(self.check(d), 1, d)


if __name__ == "__main__":
    unittest.main()
