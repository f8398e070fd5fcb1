"""Mask secrets in text before memsift stores it, pastes it or sends it anywhere.

`mask(text)` is the one door: every path where text leaves memsift's control calls it.
Each secret becomes a typed placeholder such as ``[SECRET:aws-access-key]``, so a reader
(or the decision model) still sees that a credential was there. Everything else stays
character for character.

Two detectors run, and the union of their spans is masked:

1. detect-secrets 1.5.0 (pinned in pyproject), with the semantics of its file scan, run in
   memory through the internal `_process_line_based_plugins` (research note
   decision-model.md, section D, option b; `tests/test_secrets.py` pins its signature).
   The public `scan_line` is never used: it is "eager" and returns every word of code
   (trap 1). The scan runs under the name `memsift-text.yaml` because the keyword plugin
   picks its regexes by file extension (trap 3): with a YAML name `password: value`,
   `password = "value"` and `export DB_PASSWORD=value` are all flagged, with `.txt`,
   `.py` or `.env` the unquoted forms are not.
2. memsift's own rules for what detect-secrets misses or reports badly: the whole PEM
   block (detect-secrets reports only its header, trap 2), newer token formats (Anthropic,
   Google, Hugging Face...), credentials in URLs and the key of a Sentry DSN, passwords on
   a command line (`mysql -pV`, `mysql --password V`, `redis-cli -a V`, `docker login -p
   V`, `sshpass -p V`, `PGPASSWORD=V psql`), `NAME=value` lines whose NAME sounds secret,
   secrets named in a sentence in en/fr/de/es/zh ("the password for staging is V", "le mot
   de passe root est V", "密码是V", "my passphrase is correct horse battery staple", "mein
   Passwort ist Sonne Mond Sterne 42", "Unseal Key 1: <random>", "the secret is <random>"),
   a random token given to a login verb ("unseal with V", `vault login V`) and the password
   of a user/password pair ("login is admin / V", "creds: admin/V"). Most
   formats are taken from gitleaks' default config (MIT), commit 420a0f5:
   https://github.com/gitleaks/gitleaks/blob/420a0f55f4a7a03dfe701ceb1f4f66a7c68b26b4/config/gitleaks.toml
   and, for the prefixed formats added for issue 11, commit b58d3f1 (2026-07-22):
   https://github.com/gitleaks/gitleaks/blob/b58d3f102cf3a2c84cb7f923d05c25c9b1aed84b/config/gitleaks.toml
   gitleaks rules that need a vendor's name before a bare value (adafruit, twitter...) are
   left to the sentence and `NAME=value` rules, which take any value that looks random.

Cost, measured in a fresh interpreter, import of this module (and of logging, dataclasses
and typing) included, median of 9 CPU times (`bench/secrets_bench.py` prints them again,
with false hits on prose and on 1 MB of standard-library source, and the cases masked):

- short prose, nothing that could trigger detect-secrets: 21 ms (36 ms before the rules
  were compiled on first use); detect-secrets is not imported and almost no rule compiled;
- 5 KB with secrets of the corpus, a PEM key and developer prose: 151 ms, of which about
  100 ms imports detect-secrets.

Once loaded, masking costs about 0.45 s of CPU per MB of dense developer prose with
memsift's rules alone (0.95 s before issue 11 added 48 formats and the sentence rule: each
format now runs only where one of its keywords occurs).

Texts longer than 200,000 characters are masked with memsift's rules alone
(detect-secrets costs about 5 ms per KB); lines longer than 4,096 characters are given to
detect-secrets in overlapping windows, because its keyword regex is quadratic in line length.
"""

from __future__ import annotations

import bisect
import functools
import logging
import math
import re
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Iterator, NamedTuple

log = logging.getLogger("memsift")

__all__ = ["Masked", "mask"]


@dataclass(frozen=True)
class Masked:
    """The masked text, and the type of each masked span in order of appearance."""

    text: str
    found: tuple[str, ...] = ()


class _Span(NamedTuple):
    start: int
    end: int
    kind: str


_PLACEHOLDER = re.compile(r"\[SECRET:[a-z0-9-]{1,40}\]")
_SURROGATE = re.compile("[\ud800-\udfff]")

# In a merge the most specific type wins: a token's own format (0), then what its context
# says (1), then "a value next to a secret-sounding name" or "random-looking" (2).
_RANK = {"bearer-token": 1, "basic-auth": 1, "url-password": 1,
         "password": 2, "secret": 2, "high-entropy-string": 2}

_END = r"(?![\w-])"  # a token ends where its alphabet ends

# (type, keywords, regex): the masked part is the group named `s`, or else the whole match.
# "gitleaks" = the rule of that id in the gitleaks config cited in the module docstring;
# "detect-secrets" = the plugin of that name in detect-secrets 1.5.0 (Apache-2.0).
# A rule runs only on a text whose lower-cased form holds one of its keywords (none:
# always), and is compiled on first use (`_compiled`). This is gitleaks' own prefilter (the
# `keywords` of its rules): a long text is scanned for the formats it may hold, not for all
# 84, and short prose compiles almost none of them.
_RULES: tuple[tuple[str, tuple[str, ...], str], ...] = (
        # gitleaks private-key, with a bounded body; the second branch masks a truncated
        # block (no END line), plain or JSON-escaped ("\n" between lines).
        ("private-key", ('-----begin',), r"-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----"
                        r"(?:[\s\S]{0,20000}?-----END[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----"
                        r"|(?:(?:\s|\\[rn]){1,4}[A-Za-z0-9+/=]{16,200}){0,300})"),
        ("age-secret-key", ('age-secret-key-1',), r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}"),  # gitleaks
        ("aws-access-key", ('a3t', 'akia', 'asia', 'abia', 'acca'), r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b"),  # gitleaks
        # detect-secrets AWSKeyDetector's secret-key pattern, quotes made optional
        ("aws-secret-key", ('aws',), r"(?i)\baws[\w.-]{0,20}?(?:secret|private)[\w.-]{0,20}?[\"']?[ \t]*"
                           r"(?:[:=]|=>)[ \t]*[\"']?(?P<s>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"),
        # a bare 40-character secret key written near its access key id, as people paste a
        # key pair into a message ("AKIA... / wJalr..."): mixed case, as AWS issues them
        ("aws-secret-key", ('akia', 'asia'), r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b[\s\S]{0,100}?(?<![A-Za-z0-9/+])"
                           r"(?P<s>(?=[A-Za-z0-9/+]{0,39}[a-z])(?=[A-Za-z0-9/+]{0,39}[A-Z])[A-Za-z0-9/+]{40})"
                           r"(?![A-Za-z0-9/+=])"),
        ("azure-storage-key", ('accountkey=',), r"AccountKey=(?P<s>[A-Za-z0-9+/=]{86,88})"),  # detect-secrets
        # gitleaks anthropic-api-key is sk-ant-api03-[\w-]{93}AA; this also takes admin keys
        ("anthropic-api-key", ('sk-ant-',), r"\bsk-ant-(?:api|admin|oat|sid)\d{2}-[\w-]{20,300}"),
        ("openai-api-key", ('sk-',), r"\bsk-(?:proj|svcacct|admin)-[\w-]{20,300}"  # gitleaks, loosened
                           r"|\bsk-[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}\b"  # gitleaks
                           r"|\bsk-[A-Za-z0-9]{40,100}\b"),  # legacy sk- + 48
        ("openrouter-api-key", ('sk-or-v1-',), r"\bsk-or-v1-[a-f0-9]{64}\b"),  # vendor format
        ("groq-api-key", ('gsk_',), r"\bgsk_[A-Za-z0-9]{52}\b"),  # vendor format
        ("google-api-key", ('aiza',), r"\bAIza[\w-]{35}" + _END),  # gitleaks gcp-api-key
        ("huggingface-token", ('hf_', 'api_org_'), r"\b(?:hf|api_org)_[A-Za-z]{34,60}\b"),  # gitleaks
        ("github-token", ('ghp_', 'gho_', 'ghu_', 'ghs_', 'ghr_', 'github_pat_'), r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36}\b|\bgithub_pat_\w{82}\b"),  # gitleaks
        ("gitlab-token", ('glpat-', 'gldt-', 'glft-', 'glsoat-', 'glrt-', 'glptt-', 'glcbt-', 'glimt-', 'glagent-', 'gloas-', 'glffct-'), r"\bgl(?:pat|dt|ft|soat|rt|ptt|cbt|imt|agent|oas|ffct)-[\w-]{20,300}(?:\.[0-9a-z]{9}\b)?"),  # gitleaks, routable too
        ("slack-token", ('xox', 'xapp-'), r"\bxox[abeoprs]-[\w-]{10,300}|\bxapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+"),  # gitleaks
        ("slack-webhook", ('hooks.slack.com',), r"(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{43,56}"),  # gitleaks
        ("stripe-key", ('sk_', 'rk_', 'whsec_'), r"\b(?:sk|rk)_(?:test|live|prod)_[A-Za-z0-9]{10,99}\b|\bwhsec_[A-Za-z0-9]{24,64}\b"),  # gitleaks
        ("square-token", ('eaaa', 'sq0atp-', 'sq0csp-'), r"\b(?:EAAA|sq0atp-)[\w-]{22,60}" + _END + r"|\bsq0csp-[\w-]{43}"),  # gitleaks, detect-secrets
        ("npm-token", ('npm_',), r"\bnpm_[A-Za-z0-9]{36}\b"),  # gitleaks
        ("pypi-token", ('pypi-',), r"\bpypi-(?:AgEIcHlwaS5vcmc|AgENdGVzdC5weXBpLm9yZw)[\w-]{50,1000}"),  # gitleaks, detect-secrets
        ("sendgrid-api-key", ('sg.',), r"\bSG\.[\w-]{22}\.[\w-]{43}" + _END),  # detect-secrets
        ("twilio-api-key", ('sk',), r"\bSK[0-9a-fA-F]{32}\b"),  # gitleaks
        ("mailgun-api-key", ('key-',), r"\bkey-[a-f0-9]{32}\b"),  # gitleaks, without its "mailgun" context
        ("digitalocean-token", ('_v1_',), r"\bdo[opr]_v1_[a-f0-9]{64}\b"),  # gitleaks
        ("shopify-token", ('shpat_', 'shpca_', 'shppa_', 'shpss_'), r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b"),  # gitleaks
        # gitleaks doppler-api-token is dp.pt. only; service tokens are dp.st.[<config>.]<token>
        ("doppler-token", ('dp.',), r"\bdp\.(?:pt|st|sa|ct|scim|audit)\.(?:[a-z0-9_-]{1,40}\.)?[A-Za-z0-9]{40,44}\b"),
        ("databricks-token", ('dapi',), r"\bdapi[a-f0-9]{32}(?:-\d)?\b"),  # gitleaks
        ("discord-bot-token", (), r"\b[MNO][\w-]{23,25}\.[\w-]{6}\.[\w-]{27,38}" + _END),  # detect-secrets
        ("telegram-bot-token", (), r"(?:\b|(?<=/bot))\d{8,10}:[\w-]{35}" + _END),  # detect-secrets
        ("vault-token", ('hvs.', 'hvb.'), r"\bhv[sb]\.[\w-]{90,300}"),  # gitleaks
        ("grafana-token", ('glsa_', 'glc_'), r"\bglsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}\b|\bglc_[A-Za-z0-9+/]{32,400}={0,3}"),  # gitleaks
        ("linear-api-key", ('lin_api_',), r"\blin_api_[A-Za-z0-9]{40}\b"),  # gitleaks
        ("postman-api-key", ('pmak-',), r"\bPMAK-[a-f0-9]{24}-[a-f0-9]{34}\b"),  # gitleaks
        # Added for issue 11 from gitleaks b58d3f1 (see the module docstring): token formats
        # with a prefix of their own, which need no name before them.
        ("docker-token", ('dckr_',), r"\bdckr_(?:pat|oat)_[\w-]{27,60}" + _END),  # not in gitleaks: SonarSource rule S6782, Nosey Parker np.docker.1
        ("1password-token", ('a3-', 'ops_eyj'), r"\bA3-[A-Z0-9]{6}-(?:[A-Z0-9]{11}|[A-Z0-9]{6}-[A-Z0-9]{5})-[A-Z0-9]{5}-[A-Z0-9]{5}-[A-Z0-9]{5}\b"
                            r"|\bops_eyJ[A-Za-z0-9+/]{250,5000}={0,3}"),  # gitleaks 1password-secret-key, -service-account-token
        ("adobe-client-secret", ('p8e-',), r"\bp8e-[A-Za-z0-9]{32}\b"),  # gitleaks
        ("airtable-token", ('pat',), r"\bpat[A-Za-z0-9]{14}\.[a-f0-9]{64}\b"),  # gitleaks airtable-personnal-access-token
        ("alibaba-access-key", ('ltai',), r"\bLTAI[A-Za-z0-9]{20}\b"),  # gitleaks alibaba-access-key-id
        ("artifactory-token", ('akcp', 'cmvmd'), r"\bAKCp[A-Za-z0-9]{69}\b|\bcmVmd[A-Za-z0-9]{59}\b"),  # gitleaks
        ("aws-bedrock-api-key", ('absk', 'bedrock-api-key-'), r"\bABSK[A-Za-z0-9+/]{109,269}={0,2}|\bbedrock-api-key-YmVkcm9jay5hbWF6b25hd3MuY29t[\w+/=%-]{0,4000}"),  # gitleaks
        ("azure-ad-client-secret", ('q~',), r"(?<![\w~.-])[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.-]{31,34}(?![\w~.-])"),  # gitleaks
        ("clickhouse-api-key", ('4b1d',), r"\b4b1d[A-Za-z0-9]{38}\b"),  # gitleaks clickhouse-cloud-api-secret-key
        ("clojars-token", ('clojars_',), r"\bCLOJARS_[A-Za-z0-9]{60}\b"),  # gitleaks
        ("cloudflare-origin-ca-key", ('v1.0-',), r"\bv1\.0-[a-f0-9]{24}-[a-f0-9]{146}\b"),  # gitleaks
        ("duffel-token", ('duffel_',), r"\bduffel_(?:test|live)_[\w=-]{43}"),  # gitleaks
        ("dynatrace-token", ('dt0c01.',), r"\bdt0c01\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{64}\b"),  # gitleaks
        ("easypost-token", ('ezak', 'eztk'), r"\bEZ[AT]K[A-Za-z0-9]{54}\b"),  # gitleaks easypost-api-token, -test-api-token
        ("facebook-token", ('eaam', 'eaac'), r"\bEAA[MC][A-Za-z0-9]{100,1000}\b"),  # gitleaks facebook-page-access-token
        ("flutterwave-key", ('flwseck_test-', 'flwpubk_test-'), r"\bFLW(?:SECK|PUBK)_TEST-[a-hA-H0-9]{12,32}(?:-X)?\b"),  # gitleaks
        ("flyio-token", ('fo1_', 'fm1a_', 'fm1r_', 'fm2_'), r"\bfo1_[\w-]{43}|\bfm(?:1[ar]|2)_[A-Za-z0-9+/]{100,4000}={0,3}"),  # gitleaks
        ("frameio-token", ('fio-u-',), r"\bfio-u-[\w=-]{64}"),  # gitleaks
        ("gitlab-token", ('gr1348941',), r"\bGR1348941[\w-]{20,300}"),  # gitleaks gitlab-rrt
        ("grafana-token", ('eyjrijoi',), r"\beyJrIjoi[A-Za-z0-9]{70,400}={0,3}"),  # gitleaks grafana-api-key
        ("harness-token", ('pat.', 'sat.'), r"\b(?:pat|sat)\.[\w-]{22}\.[A-Za-z0-9]{24}\.[A-Za-z0-9]{20}\b"),  # gitleaks
        ("terraform-token", ('.atlasv1.',), r"\b[A-Za-z0-9]{14}\.atlasv1\.[\w=-]{60,70}"),  # gitleaks hashicorp-tf-api-token
        ("heroku-api-key", ('hrku-aa',), r"\bHRKU-AA[\w-]{58}"),  # gitleaks heroku-api-key-v2
        ("infracost-token", ('ico-',), r"\bico-[A-Za-z0-9]{32}\b"),  # gitleaks
        ("intra42-client-secret", ('s-s4t2',), r"\bs-s4t2(?:ud|af)-[a-fA-F0-9]{64}\b"),  # gitleaks
        ("maxmind-license-key", ('_mmk',), r"\b[A-Za-z0-9]{6}_[A-Za-z0-9]{29}_mmk\b"),  # gitleaks
        ("newrelic-api-key", ('nrak-', 'nrii-', 'nrjs-'), r"\bNR(?:AK|II)-[A-Za-z0-9-]{27,32}\b|\bNRJS-[a-f0-9]{19}\b"),  # gitleaks, without its "new relic" context
        ("notion-token", ('ntn_',), r"\bntn_\d{11}[A-Za-z0-9]{35}\b"),  # gitleaks
        ("octopus-deploy-api-key", ('api-',), r"\bAPI-[A-Z0-9]{26}\b"),  # gitleaks
        ("openshift-token", ('sha256~',), r"\bsha256~[\w-]{43}" + _END),  # gitleaks
        ("perplexity-api-key", ('pplx-',), r"\bpplx-[A-Za-z0-9]{48}\b"),  # gitleaks
        ("planetscale-token", ('pscale_',), r"\bpscale_(?:tkn|oauth|pw)_[\w=.-]{32,64}"),  # gitleaks
        ("prefect-token", ('pnu_',), r"\bpnu_[A-Za-z0-9]{36}\b"),  # gitleaks
        ("pulumi-token", ('pul-',), r"\bpul-[a-f0-9]{40}\b"),  # gitleaks
        ("readme-token", ('rdme_',), r"\brdme_[a-z0-9]{70}\b"),  # gitleaks
        ("rubygems-token", ('rubygems_',), r"\brubygems_[a-f0-9]{48}\b"),  # gitleaks
        ("scalingo-token", ('tk-us-',), r"\btk-us-[\w-]{48}" + _END),  # gitleaks
        ("sendinblue-api-key", ('xkeysib-',), r"\bxkeysib-[a-f0-9]{64}-[A-Za-z0-9]{16}\b"),  # gitleaks
        ("sentry-token", ('sntryu_', 'sntrys_'), r"\bsntryu_[a-f0-9]{64}\b|\bsntrys_eyJpYXQiO[A-Za-z0-9+/=_]{50,1000}"),  # gitleaks sentry-user-token, -org-token
        ("settlemint-token", ('sm_aat_', 'sm_pat_', 'sm_sat_'), r"\bsm_(?:aat|pat|sat)_[A-Za-z0-9]{16}\b"),  # gitleaks
        ("shippo-token", ('shippo_',), r"\bshippo_(?:live|test)_[a-fA-F0-9]{40}\b"),  # gitleaks
        ("sonarqube-token", ('squ_', 'sqp_', 'sqa_'), r"\bsq[upa]_[a-f0-9]{40}\b"),  # gitleaks sonar-api-token, without its "sonar" context
        ("sourcegraph-token", ('sgp_',), r"\bsgp_(?:[a-fA-F0-9]{16}_|local_)?[a-fA-F0-9]{40}\b"),  # gitleaks, without bare hex
        ("typeform-token", ('tfp_',), r"\btfp_[\w.=-]{59}"),  # gitleaks, without its "typeform" context
        ("defined-networking-token", ('dnkey-',), r"\bdnkey-[\w=-]{26}-[\w=-]{52}"),  # gitleaks
        ("slack-token", ('xoxe',), r"\bxoxe\.xox[bp]-\d-[A-Za-z0-9]{163,166}\b|\bxoxe-\d-[A-Za-z0-9]{146}\b"),  # gitleaks slack-config-*
        ("jwt", ('.ey',), r"\bey[A-Za-z0-9]{17,2000}\.ey[\w/\\-]{17,4000}\.(?:[\w/\\-]{10,2000}={0,2})?"),  # gitleaks
        ("url-password", ('://',), r"\b[A-Za-z][A-Za-z0-9+.-]{1,20}://[^\s:/?#@'\"]{0,100}:(?P<s>[^\s@/?#'\"]{1,200})@"),
        # gitleaks curl-auth-user, without the curl context
        ("basic-auth", ('-u', '--user'), r"(?:^|(?<=[\s'\"]))(?:-u|--user)[ \t=]+[\"']?[^\s:'\"]{1,100}:(?P<s>[^\s'\"]{3,200})"),
        ("basic-auth", ('authorization',), r"(?i)\bauthorization:[ \t]*basic[ \t]+(?P<s>[A-Za-z0-9+/]{8,400}={0,3})"),
        ("bearer-token", ('bearer',), r"(?i)\bbearer[ \t]+(?P<s>(?=[\w~+/.=-]{0,400}\d)[\w~+/.=-]{16,400})"),
        # A password given to a command on its command line. mysql and its tools take it glued
        # to -p (`-pV`; `-p V` prompts and V is the database), sshpass after -p; both only on
        # a command line that names the tool, so `gcc -pthread` and `docker run -p 8080` stay.
        # `--password=V` and `--password V` are the `_ASSIGNMENT` rule's.
        # https://dev.mysql.com/doc/refman/8.4/en/connection-options.html#option_general_password
        ("password", ('mysql', 'mariadb'), r"\b(?:mysql\w*|mariadb[\w-]*)\b[^\n|;&]{0,200}?(?<=\s)-p"
                     r"(?![\"']?\$)(?P<q>['\"])?(?P<s>(?(q)[^'\"\n]{1,200}(?=['\"])|[^\s'\"-][^\s'\"]{0,199}))"),
        ("password", ('sshpass',), r"\bsshpass\b[^\n|;&]{0,100}?(?<=\s)-p[ \t]*(?![\"']?\$)(?P<q>['\"])?(?P<s>(?(q)[^'\"\n]{1,200}(?=['\"])|[^\s'\"-][^\s'\"]{0,199}))"),
        # `--password V` / `--password=V` (also `--pass`, `--passwd`) on the command line of a
        # client that takes its password there (mysql and its tools, redis-cli, a registry
        # login, helm), and their short flags: redis-cli `-a V`, `docker|podman|buildah|
        # skopeo|nerdctl|oras|helm registry login -p V`. Any value: a password is often a
        # plain word here (the `_ASSIGNMENT` rule wants a digit). Only on a line that names
        # the tool, so `docker run -p 8080` and `ssh -p 2222` stay.
        # https://redis.io/docs/latest/develop/tools/cli/ ; https://docs.docker.com/reference/cli/docker/login/
        ("password", ('mysql', 'mariadb', 'redis-cli', 'login', 'helm'),
                     r"(?:\b(?:mysql\w*|mariadb[\w-]*|redis-cli|helm)\b|\b(?:docker|podman|buildah|skopeo|nerdctl|oras|helm)\b[^\n|;&]{0,60}?\blogin\b)"
                     r"[^\n|;&]{0,200}?(?<=\s)--pass(?:word|wd)?(?:[ \t]+|=)"
                     r"(?![\"']?\$)(?P<q>['\"])?(?P<s>(?(q)[^'\"\n]{1,200}(?=['\"])|[^\s'\"-][^\s'\"]{0,199}))"),
        ("password", ('redis-cli', 'login'),
                     r"(?:\bredis-cli\b[^\n|;&]{0,200}?(?<=\s)-a|\b(?:docker|podman|buildah|skopeo|nerdctl|oras|helm[ \t]+registry)[ \t]+login\b"
                     r"[^\n|;&]{0,200}?(?<=\s)-p)[ \t]+"
                     r"(?![\"']?\$)(?P<q>['\"])?(?P<s>(?(q)[^'\"\n]{1,200}(?=['\"])|[^\s'\"-][^\s'\"]{0,199}))"),
        # The environment variables these clients read a password from, as a command's prefix
        # or an export: libpq PGPASSWORD, mysql MYSQL_PWD, sshpass -e SSHPASS, redis-cli
        # REDISCLI_AUTH. Any value: a password is often a short word here.
        ("password", ('pgpassword', 'mysql_pwd', 'sshpass=', 'rediscli_auth'),
                     r"(?<![\w.-])(?:PGPASSWORD|MYSQL_PWD|SSHPASS|REDISCLI_AUTH)=(?![\"']?\$)(?P<q>['\"])?(?P<s>(?(q)[^'\"\n]{1,200}(?=['\"])|[^\s'\";&|]{1,200}))"),
        # A Sentry DSN, `https://<public key>[:<secret key>]@<host>/<project id>`: the key
        # part before @ lets anyone send events as the project. gitleaks has no DSN rule (its
        # sentry rules are for sntryu_/sntrys_ tokens); the shape is Sentry's:
        # https://docs.sentry.io/concepts/key-terms/dsn-explainer/
        ("sentry-dsn", ('://',), r"\bhttps?://(?P<s>[a-f0-9]{32}(?::[a-f0-9]{32})?)@[\w.-]{1,100}(?::\d{1,5})?/(?:[\w.-]{1,50}/){0,3}\d{1,12}\b"),
)

# `NAME=value`, `NAME: value`, `"NAME": "value"`, `--name value`: our own rule. NAME must
# sound secret (_SECRET_NAME) and the value must look like a literal (_plausible, strict).
_ASSIGNMENT = re.compile(
    r"(?:(?<![\w.-])--?(?P<flag>[A-Za-z][\w-]{0,60})(?:[ \t]+|=)"
    r"|(?<![\w.])(?P<name>[A-Za-z_][\w.-]{0,80})[\"'\]]{0,2}[ \t]*(?::=|=>|={1,2}|:)[ \t]*)"
    r"(?:(?P<q>[\"'`])(?P<qv>[^\"'`\n]{1,400})(?P=q)|(?P<v>[^\s\"'`,;]{1,400}))"
)
_SECRET_NAME = re.compile(
    r"(?i)passw(?:or)?d|pwd|contrase|secret|token|credential|authorization"
    r"|(?:api|access|private|signing|master|encryption|client|account|service|license|auth)[_.-]?key"
    r"|(?:^|[_.-])(?:key|auth)(?:$|[_.-])"
)
_PASSWORD_NAME = re.compile(r"(?i)pass|pwd|\bpw\b|contrase|mot de passe|mdp|kennwort|clave|\bpin\b|密码|密碼|口令")

# A secret named in a sentence, in the five languages memsift supports (en, fr, de, es, zh):
# "the password for staging is V", "the admin password on prod: V", "use password V to log
# in", "le mot de passe de la prod est V", "das Kennwort lautet V", "la clave del wifi es V",
# "密码是V", "the secret is V", "api key V". Our own rule. The name is a password word
# (group `pw`), a key word (`key`) or a shorthand that only counts before ":" or "="
# (`short`: pw, pwd, pass...), or a passphrase word (`phrase`); a prepositional phrase may
# follow it ("for the staging db", "de la prod", "für den Server") or, after a password or
# passphrase word, one or two qualifier words ("clave ssh", "mot de passe root",
# `_QUALIFIER`) or, after a key word, a number ("Unseal Key 1:", as `vault operator init`
# prints them), then a copula, a colon or nothing, then the value. What
# the value must look like depends on that context: see `_sentence_spans`.
_LETTER_BEFORE = r"(?<![^\W\d_])"  # not right after a letter: DB_PASSWORD and api-key, not tiktoken
_KEY_WORDS = (_LETTER_BEFORE + r"(?:secret|secreto|geheimnis|token|jeton|key|(?:clé|cle)(?:[ ](?:d['’])?api|[ ]secrète|[ ]privée)?|llave|credentials?"
              r"|clave[ ](?:de[ ])?api|clave[ ](?:secreta|privada))"
              r"|schlüssel|(?-i:(?<=[a-z])(?:Secret|Token|Key))|密钥|秘钥|私钥|令牌")
# A passphrase is several words by nature: its value runs to the end of the clause.
_PASSPHRASE_WORDS = (_LETTER_BEFORE + r"(?:pass[ -]?phrase|phrase[ ](?:secrète|de[ ]passe)|frase[ ](?:de[ ]contraseña|secreta))"
                     r"|(?-i:(?<=[a-z])Passphrase)|口令短语|密码短语")
_PASSWORD_WORDS = (_LETTER_BEFORE + r"(?:passw(?:or)?d|passcode|mot[ ]de[ ]passe|mdp"
                   r"|contrase(?:ñ|n)a|clave)"
                   r"|passwort|kennwort|(?-i:(?<=[a-z])(?:Password|Passwd))"
                   r"|(?-i:" + _LETTER_BEFORE + r"PIN)(?:[ -]?code)?|code[ ]PIN|密码|密碼|口令")
_SHORT_WORDS = r"(?<![\w.-])(?:pw|pwd|pass|passwd|mdp|pin)"
_PREPOSITION = (r"(?:\s+(?:for|on|of|to|at|in|from|de|du|des|pour|sur|chez|dans|à|au|aux|für|fuer|von|vom"
                r"|zum|zur|auf|bei|im|am|del|para|en|al|por)\s+|\s+d['’])")
_COPULA_WORD = r"(?:is|was|est|était|sera|ist|lautet|war|es|era|será)(?!\w)"
# One or two words that qualify a password word before its copula: "mot de passe root est
# V", "clave ssh es V", "password you gave was V". Not a word naming a shape or a place.
_QUALIFIER = (r"(?:\s+(?!" + _COPULA_WORD + r"|(?:file|path|url|name|id|hash|format|length|size|type|policy|manager"
              r"|field|hint|reset|prompt|rule|requirement|fichier|chemin|nom|datei|archivo|nombre)(?!\w))"
              r"[\w.@'’/-]+){1,2}")
_COPULA = (r"\s*(?:[:=：]|=>|->)\s*"
           r"|\s+" + _COPULA_WORD +
           r"(?:\s+(?:now|still|currently|actually|just|maintenant|désormais|toujours|jetzt|nun|ahora|todavía)(?!\w))?"
           r"\s*[:：]?\s*"
           r"|\s*(?:是|为|為|设置为|设为|改为|改成|设成)\s*")
_CJK = r"\u3000-\u303f\u3400-\u9fff\uff00-\uffef"
_SENTENCE = (  # the leading class (first letters of the names) halves the cost of a scan
    r"(?i)(?=[PKSTJCGLMF密秘私令口])(?:(?P<key>" + _KEY_WORDS + r")|(?P<phrase>" + _PASSPHRASE_WORDS + r")"
    r"|(?P<pw>" + _PASSWORD_WORDS + r")|(?P<short>" + _SHORT_WORDS + r"))"
    r"(?=(?:(?P<prep>" + _PREPOSITION + r"[\w.@'’/-]+(?:\s+[\w.@'’/-]+){0,3}?"
    r"|(?(pw)" + _QUALIFIER + r"|(?(phrase)" + _QUALIFIER + r"|(?(key)\s+\#?\d{1,2}|(?!)))))(?=" + _COPULA + r"))?"
    r"(?:(?P<cop>" + _COPULA + r")|(?P<bare>\s+|(?<=[\u3400-\u9fff])(?=[!-~])))"
    r"(?:(?P<q>[\"'`“‘«„「])\s?(?P<qv>[^\"'`”’»“」\n]{1,200}?)\s?[\"'`”’»」]"
    r"|(?P<v>[^\s\"'`“”‘’«»„「」" + _CJK + r"]{1,200})))"
)  # all but the name is a lookahead, so that "secret key is V" is also read from "key"
# Every name `_SENTENCE` knows holds one of these: without one, it is neither compiled nor run.
_SENTENCE_HINT = re.compile(r"(?i)pass|pw|pin|key|token|secr|geheim|jeton|cl[eé]|clave|llave|credential|kennwort|mdp|frase"
                            r"|contrase|schlüssel|密码|密碼|口令|密钥|秘钥|私钥|令牌")
# A verb just before a password word makes "use password V" a password given, not a topic.
_VERB_BEFORE = re.compile(
    r"(?i)(?:\b(?:use|using|with|try|enter|type|avec|utilise[rz]?|essaie[rz]?|tape[rz]?|saisis|entre[rz]?"
    r"|mit|benutze[n]?|verwende[n]?|nimm|gib|con|usa[r]?|utiliza[r]?|prueba|introduce)\b|用|使用|输入)"
    r"(?:\s*[^\s.,;:!?]+){0,3}\s*$"
)
# Before a key word, names of keys that are not secrets: "the public key is AAAAC3...".
_NOT_SECRET_BEFORE = re.compile(
    r"(?i)(?:public|pub|primary|foreign|cache|sort|hot|natural|composite|partition|lookup|row|group"
    r"|dict|idempotency|routing|shard|hash|map|index|host|öffentliche[rnms]?|primär|公)[\s_-]*$"
)
_VALUE_END = ".,;:?)]}>»”’"
_WORDS_JOINED = re.compile(r"[^\W\d_]+(?:[-'’.][^\W\d_]+)*\.?")  # re-used, e.g., non-empty
_VERSION = re.compile(r"(?i)v?\d+(?:\.\d+)+[\w.+-]*")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?")
_SEGMENT = re.compile(r"[-_.:/+=~]+")
_FILE_NAME = re.compile(r"\.[A-Za-z]{2,4}$")
_EMAIL = re.compile(r"[^@\s]+@[\w-]+(?:\.[\w-]+)+")
# Names that hold a secret's address or shape, not the secret: API_KEY_FILE, TOKEN_URL...
_NOT_SECRET_NAME = re.compile(
    r"(?i)(?:^|[_.-])(?:url|uri|path|file|dir|endpoint|host|port|name|type|id|header|format|len|length"
    r"|size|ttl|expiry|expires|timeout|algorithm|method|provider|mode|version|region|field|env|var"
    r"|prefix|count|index|idx)$|^(?:pwd|oldpwd|keys|tokens|authors?|author[_.-]\w*|keyword\w*)$"
    r"|(?:public|pub|primary|foreign|cache|sort|hot|idx|natural|schema|sequence|bucket|partition"
    r"|lookup|row|group|dict)[_.-]?key|public[_.-]?token"
)
_PLACEHOLDER_VALUE = re.compile(
    r"(?i)^(?:\W*|x+|\.+|<[^>]*>|\$\{[^}]*\}|\$\(?[A-Za-z_]\w*\)?|%[A-Za-z_]\w*%|\{\{.*\}\}"
    r"|%s|\{\w*\}|your[_-][\w-]*|changeme|changeit|dummy|example|placeholder|redacted|none|null"
    r"|nil|true|false|undefined|secret|password|passwd|pass|token|test|string|value|xxx\w*|\*+\w*)$"
)
_IDENTIFIER = re.compile(r"[A-Za-z_]+(?:\.[A-Za-z_]+)*")
_DOTTED_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")  # win32api.RegEnumKey, self.key2
_NEXT_FIELD = re.compile(r";(?=\s*\w+=)")
_DIGEST = re.compile(r"(?i)(?:sha(?:1|224|256|384|512)|md5)[-:]")  # npm "integrity", pip --hash

# The cheap gate before detect-secrets, whose plugins need a secret-sounding name, a long
# random-looking run, a key header or a URL with a password: prose without one of them goes
# out without importing it.
_TRIGGER = re.compile(
    r"-----BEGIN|://[^\s/@]{0,100}:[^\s/@]{1,200}@"
    r"|(?i:(?:key|token|secret|pass|pwd|auth|credential|contrase)[\w.-]{0,40}[\"'\]]{0,2}\s*(?:[:=]|=>))"
)
_RUN = re.compile(r"[A-Za-z0-9+=_-]{16,}")

_DS_FILENAME = "memsift-text.yaml"  # YAML: the keyword rules that need no quotes (trap 3)
# Public IPv4 addresses are not credentials, and notes keep server addresses on purpose.
# Bare hex strings are digests (git objects, sha256 sums, ETags) that notes need; a hex
# secret next to a secret-sounding name is still caught by KeywordDetector and our rule.
_DS_DISABLED = ("IPPublicDetector", "HexHighEntropyString")
_DS_MAX_CHARS = 200_000
_DS_WINDOW, _DS_OVERLAP = 4_096, 256
_DS_LOCK = threading.Lock()  # detect-secrets keeps its settings in a global
_DS_TYPES = {
    "Artifactory Credentials": "artifactory-token",
    "AWS Access Key": "aws-access-key",
    "Azure Storage Account access key": "azure-storage-key",
    "Basic Auth Credentials": "url-password",
    "Cloudant Credentials": "cloudant-credentials",
    "Discord Bot Token": "discord-bot-token",
    "GitHub Token": "github-token",
    "GitLab Token": "gitlab-token",
    "Base64 High Entropy String": "high-entropy-string",
    "Hex High Entropy String": "high-entropy-string",
    "IBM Cloud IAM Key": "ibm-cloud-iam-key",
    "IBM COS HMAC Credentials": "ibm-cos-hmac-key",
    "JSON Web Token": "jwt",
    "Mailchimp Access Key": "mailchimp-api-key",
    "NPM tokens": "npm-token",
    "OpenAI Token": "openai-api-key",
    "Private Key": "private-key",
    "PyPI Token": "pypi-token",
    "Secret Keyword": "secret",  # or "password", from the name before the value
    "SendGrid API Key": "sendgrid-api-key",
    "Slack Token": "slack-token",
    "SoftLayer Credentials": "softlayer-credentials",
    "Square OAuth Secret": "square-token",
    "Stripe Access Key": "stripe-key",
    "Telegram Bot Token": "telegram-bot-token",
    "Twilio API Key": "twilio-api-key",
}


def mask(text: str) -> Masked:
    """Replace every secret found in `text` with ``[SECRET:<type>]``.

    Spans found by detect-secrets and by memsift's rules are merged where they overlap;
    a merged span takes the most specific type, then the longest, then the first.
    Placeholders already in the text are left alone, so masking twice changes nothing.

    :param text: any str: empty, huge, with NUL bytes or lone surrogates.
    :returns: `Masked(text, found)`, `found` holding one type per masked span.
    :raises TypeError: if `text` is not a str. Nothing else: if detect-secrets fails,
        memsift's rules alone are used and a warning is logged; if those fail too, the
        whole text is withheld as ``[SECRET:unscanned]``.
    """
    if not isinstance(text, str):
        raise TypeError(f"mask() takes a str, not {type(text).__name__}")
    if not text:
        return Masked(text)
    try:
        # The scanned copy keeps every offset: our placeholders become blanks no rule takes,
        # lone surrogates (which detect-secrets cannot hash) become U+FFFD.
        scan = _PLACEHOLDER.sub(lambda m: "#" * len(m.group()), text)
        scan = _SURROGATE.sub("\ufffd", scan)
        spans = list(_rule_spans(scan))
        if len(scan) > _DS_MAX_CHARS:
            log.info("text of %d chars: secrets masked with memsift's rules only", len(scan))
        elif spans or _has_trigger(scan):
            spans.extend(_detect_secrets_spans(scan))
        return _apply(text, spans)
    except Exception:  # pragma: no cover - a bug in our rules; fail closed
        log.warning("secret masking failed; text withheld", exc_info=True)
        return Masked("[SECRET:unscanned]", ("unscanned",))


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _rule_spans(scan: str) -> Iterator[_Span]:
    lowered = scan.lower()
    for kind, keywords, pattern in _RULES:
        if keywords and not any(k in lowered for k in keywords):
            continue
        rx = _compiled(pattern)
        group = "s" if "s" in rx.groupindex else 0
        for m in rx.finditer(scan):
            if not _PLACEHOLDER_VALUE.match(m.group(group)):
                yield _Span(m.start(group), m.end(group), kind)
    yield from _sentence_spans(scan)
    yield from _given_spans(scan)
    for m in _ASSIGNMENT.finditer(scan):
        name = m.group("flag") or m.group("name")
        value_group = "qv" if m.group("q") else "v"
        value = m.group(value_group)
        if _secret_name(name) and _plausible(value, quoted=bool(m.group("q")), strict=True):
            kind = "password" if _PASSWORD_NAME.search(name) else "secret"
            yield _Span(m.start(value_group), m.end(value_group), kind)


def _sentence_spans(scan: str) -> Iterator[_Span]:
    """Values named in a sentence (`_SENTENCE`), each judged by what names it.

    - a password word with a copula or a colon ("password for X is V", "密码：V"), or a
      shorthand before ":"/"=" ("pw: V", "pass=V"): `_password_like`;
    - a password word right before the value, after a verb ("use password V", "avec le mot
      de passe V", "mit dem Passwort V", "用密码V"): `_password_like`; a value cut by a
      space goes on while the next word also has a digit or a symbol ("p@ss w0rd",
      `_password_pieces`);
    - a passphrase word with a copula or a colon ("my ssh passphrase is correct horse
      battery staple"), or a password word whose value is 3+ plain words ("mein Passwort
      ist Sonne Mond Sterne 42", none of them a `_FUNCTION_WORD`, so "the password is easy
      to guess" stays): the value runs to the end of the clause (`_passphrase_end`: before
      punctuation or a conjunction, "and", "et", "und", "y", "和"...), at most
      8 words or 100 characters, unless it reads like a sentence about the passphrase
      ("is stored in the vault"); a one-word value is judged as a password's;
    - anything else (a key, token or secret word, with or without a copula, or a password
      word with no verb before it): the value must look random, `_random_like`.
    """
    if not _SENTENCE_HINT.search(scan):
        return
    for m in _compiled(_SENTENCE).finditer(scan):
        quoted = m["q"] is not None
        group = "qv" if quoted else "v"
        start, end = m.span(group)
        if not quoted:
            while end > start and scan[end - 1] in _VALUE_END:
                end -= 1
        value = scan[start:end]
        if not value:
            continue
        if m["phrase"] and not quoted and (m["cop"] is not None or _VERB_BEFORE.search(scan, max(0, m.start() - 60), m.start())):
            clause_end = _passphrase_end(scan, start)
            if clause_end > end:
                if _passphrase_like(scan[start:clause_end]):
                    yield _Span(start, clause_end, "password")
                continue
        if (m["pw"] and not quoted and (m["cop"] is not None or _VERB_BEFORE.search(scan, max(0, m.start() - 60), m.start()))
                and not _password_like(value, quoted=False)):
            clause_end = _passphrase_end(scan, start)
            clause = scan[start:clause_end]
            if clause_end > end and len(clause.split()) >= 3:
                if _passphrase_like(clause) and not any(_FUNCTION_WORD.fullmatch(w) for w in clause.split()):
                    yield _Span(start, clause_end, "password")
                    continue
        if (m["pw"] or m["phrase"]) and not quoted:
            end = _password_pieces(scan, start, end)
            value = scan[start:end]
        if m["short"]:
            if not (m["cop"] and m["cop"].strip() in ":=：" and m["prep"] is None
                    and _password_like(value, quoted=quoted, pin=m["short"].lower() == "pin")):
                continue
            kind = "password"
        elif m["pw"] or m["phrase"]:
            pin = "pin" in (m["pw"] or "").lower()
            if m["cop"] is not None or _VERB_BEFORE.search(scan, max(0, m.start() - 60), m.start()):
                ok = _password_like(value, quoted=quoted, pin=pin) or _random_like(value, quoted=quoted)
            else:
                ok = _random_like(value, quoted=quoted)
            if not ok:
                continue
            kind = "password"
        else:
            if (_NOT_SECRET_BEFORE.search(scan, max(0, m.start() - 30), m.start())
                    or not _random_like(value, quoted=quoted)):
                continue
            kind = "secret"
        yield _Span(start, end, kind)


# A clause ends at punctuation or at a conjunction that joins another clause ("... is
# correct horse battery staple and the vault key is ..."), in en/fr/de/es/zh.
# A token given to a verb of logging in ("unseal with V", "log in using the token V",
# "auth with V") or to vault's own commands (`vault operator unseal V`, `vault login V`).
# Our own rule; the value must look random (`_random_like`), so "log in with your SSO
# account" stays. Hashing verbs are not here: "hashed with <sha>" is a digest.
_GIVEN_HINT = re.compile(r"(?i)unseal|log[ \t]?in|sign[ \t]?in|auth")
_GIVEN = re.compile(
    r"(?i)(?:\b(?:unseal|log[ \t]?in|sign[ \t]?in|auth(?:enticate)?|authori[sz]e)[ \t]+(?:with|using)[ \t]+"
    r"(?:(?:the|this|that|my|our|a|an|root|unseal|api|access|vault|key|token|secret)[ \t]+){0,3}"
    r"|\bvault[ \t]+(?:operator[ \t]+)?(?:unseal|login)(?:[ \t]+-[\w-]+(?:=\S+)?)*[ \t]+)"
    r"(?P<s>[^\s\"'`]{12,400})"
)
# "login is admin / V", "credentials are admin:V", "creds: admin/V": a user and a password
# named together. Our own rule; the password must look like one (`_password_like`) and not
# be a path, so "the login is GET /api/login" and "creds: read/write" stay.
_PAIR_HINT = re.compile(r"(?i)login|cred|identifiant|zugang|anmeldedaten|凭据|账号")
_PAIR = re.compile(
    r"(?i)(?<![^\W\d_])(?:logins?|credentials?|creds|identifiants|zugangsdaten|anmeldedaten|credenciales|凭据|账号密码)"
    r"(?:\s+(?:is|are|sont|est|sind|ist|son|es|lauten)|\s*[:=：])\s*"
    r"(?P<user>[\w.@+-]{1,64})[ \t]*[/:][ \t]*(?P<q>[\"'`])?(?P<s>(?(q)[^\"'`\n]{4,200}(?=[\"'`])|[^\s\"'`/]{1,200}))"
)


# A user and a password named together without a "login is" first: "log in to grafana with
# admin / V", "sign in as deploy:V", "user app, pass V", "username ci password V". Our own
# rule (found by a fresh user's trial of the MCP tools); the password must look like one
# and hold a digit or a symbol, so "sign in with Google / GitHub" stays (after "user X, pass",
# 8 characters at least: "user 42, pass v2-api" stays).
_PAIR_LOOSE_HINT = re.compile(r"(?i)log[ \t]?in|sign[ \t]?in|user")
_PAIR_LOOSE = re.compile(
    r"(?i)(?:\b(?:log[ \t]?in|sign[ \t]?in)(?:[ \t]+(?:to|into|on|at)[ \t]+[\w.-]{1,64})?[ \t]+(?:with|as|using)[ \t]+"
    r"(?P<user>[\w.@+-]{1,64})[ \t]*[/:][ \t]*"
    r"|\buser(?:name)?(?:[ \t]*[:=][ \t]*|[ \t]+)(?P<user2>[\w.@+-]{1,64})[ \t]*[,;]?[ \t]+(?:pass(?:word|wd)?|pwd|pw)"
    r"(?:[ \t]*[:=][ \t]*|[ \t]+))"
    r"(?P<s>[^\s\"'`/]{1,200})"
)


def _given_spans(scan: str) -> Iterator[_Span]:
    """Tokens given to a login verb (`_GIVEN`) and passwords of a user/password pair (`_PAIR`,
    `_PAIR_LOOSE`)."""
    if _GIVEN_HINT.search(scan):
        for m in _GIVEN.finditer(scan):
            start, end = m.span("s")
            while end > start and scan[end - 1] in _VALUE_END:
                end -= 1
            if _random_like(scan[start:end]):
                yield _Span(start, end, "secret")
    if _PAIR_HINT.search(scan):
        for m in _PAIR.finditer(scan):
            start, end = m.span("s")
            if not m["q"]:
                while end > start and scan[end - 1] in _VALUE_END:
                    end -= 1
            if end > start and _password_like(scan[start:end], quoted=bool(m["q"])):
                yield _Span(start, end, "password")
    if _PAIR_LOOSE_HINT.search(scan):
        for m in _PAIR_LOOSE.finditer(scan):
            start, end = m.span("s")
            while end > start and scan[end - 1] in _VALUE_END:
                end -= 1
            value = scan[start:end]
            if (value and _password_like(value, quoted=False) and not value.isalpha() and not value.isdigit()
                    and (m["user"] is not None or len(value) >= 8)):  # "user X, pass Y": a longer Y, not "v2-api"
                yield _Span(start, end, "password")


_CLAUSE_END = re.compile(r"[.;,)!?](?=\s|$)|[\n，。；！？）]"
                         r"|(?i:[ \t]+(?:and|or|but|et|ou|mais|und|oder|aber|y|o|pero)(?=\s|$))|\s*(?:和|或)")
_PHRASE_WORD = re.compile(r"[^\W_][\w'’&@#$%^*+=!?~-]*")
# The first word of a sentence about a passphrase, not of one: "is stored in the vault",
# "is too short", "ist im Tresor", "est dans 1Password", "es obligatoria".
_NOT_PHRASE_START = re.compile(
    r"(?i)(?:not|no|never|too|very|so|the|a|an|in|at|on|for|to|from|of|by|with|only|still|now|also|always"
    r"|required|optional|empty|wrong|incorrect|invalid|missing|long|short|weak|strong|secure|set|kept|unknown"
    r"|same|different|case|what|where|how|needed|mandatory|shared|known|below|above|here|there|that|this|it"
    r"|pas|dans|trop|requis|requise|obligatoire|vide|la|le|les|une|un|ici|dé(?:fini|finie)|stockée?"
    r"|nicht|kein|keine|zu|im|der|die|das|ein|eine|falsch|leer|erforderlich|hier|gespeichert"
    r"|en|el|los|las|una|muy|demasiado|incorrecta|obligatoria|aquí|guardada|vacía"
    r"|\w+ed|\w+ée?s?)$"
)


# Words of a sentence, not of a passphrase: a value after a password word ("mein Passwort
# ist Sonne Mond Sterne 42") that holds one is a sentence about the password ("the
# password is easy to guess", "le mot de passe est valable pour un an").
_FUNCTION_WORD = re.compile(
    r"(?i)(?:the|a|an|to|of|in|on|at|for|from|by|with|as|than|then|that|this|it|its|is|are|was|be|been|if|when|so"
    r"|not|into|about|like|after|before|until|via|per|i|you|he|she|we|they|me|my|your|our|their"
    r"|le|la|les|un|une|des|de|du|à|au|aux|en|dans|pour|par|sur|avec|que|qui|est|pas|ne|trop|très|plus|sans|chez"
    r"|il|elle|nous|vous|ils|der|die|das|den|dem|des|ein|eine|einen|einem|im|am|zu|zum|zur|mit|für|von|vom|auf"
    r"|bei|ist|nicht|kein|keine|sehr|nach|aus|ich|du|er|sie|wir|el|los|las|del|al|con|por|para|es|no|muy|sin"
    r"|sobre|yo|tú|su|se|d['’]\w*|l['’]\w*)")


def _passphrase_end(scan: str, start: int) -> int:
    """Where the passphrase value starting at `start` ends: the end of its clause (`. ; , )
    ! ?` before a space, a line break, CJK punctuation, a conjunction (`_CLAUSE_END`), or
    the end), at most 8 words and 100 characters."""
    limit = min(len(scan), start + 100)
    stop = _CLAUSE_END.search(scan, start, limit)
    end = stop.start() if stop else limit
    words = list(re.finditer(r"\S+", scan[start:end]))
    if len(words) > 8:
        end = start + words[7].end()
    elif not stop and end == start + 100 and end < len(scan) and not scan[end].isspace() and len(words) > 1:
        end = start + words[-2].end()  # never cut a word at the character limit
    return end


def _passphrase_like(value: str) -> bool:
    """Whether the words of `value` (2 to 8, from `_passphrase_end`) read as a passphrase:
    each a word of letters, digits and symbols (not code, a path or a URL), and the first
    not one that starts a sentence about the passphrase (`_NOT_PHRASE_START`)."""
    words = value.split()
    return (2 <= len(words) <= 8 and all(_PHRASE_WORD.fullmatch(w) for w in words)
            and not _NOT_PHRASE_START.fullmatch(words[0]) and not _PLACEHOLDER_VALUE.match(words[0]))


_PIECE = re.compile(r"[ ](?=[^\s\"'`]*[^\W\d_])(?=[^\s\"'`]*(?:\d|[^\w\s]))[^\s\"'`()\[\]{}<>]{2,40}")


def _password_pieces(scan: str, start: int, end: int) -> int:
    """The end of a password value `scan[start:end]` grown over the words that continue it
    across a single space: the value and each word have a letter and a digit or a symbol
    ("p@ss w0rd"), so "hunter22 for staging" or "is 12 characters" do not grow. At most 4
    words."""
    first = scan[start:end]
    if not (any(c.isalpha() for c in first) and any(not c.isalpha() for c in first)):
        return end
    for _ in range(3):
        m = _PIECE.match(scan, end)
        if not m:
            break
        piece_end = m.end()
        while piece_end > m.start() + 1 and scan[piece_end - 1] in _VALUE_END:
            piece_end -= 1
        if piece_end - m.start() < 3:
            break
        end = piece_end
    return end


def _password_like(value: str, *, quoted: bool, pin: bool = False) -> bool:
    """Whether `value`, given as a password in a sentence, looks like one and not like a word.

    Quoted, anything of 4+ characters that is not a placeholder (a passphrase may hold
    spaces). Unquoted, 6+ characters with a letter and a digit, a symbol or an inner
    capital ("hunter22", "Tr0ub4dor&3", "correct-horse-battery-staple"), or 6+ digits
    (4+ for a PIN). Plain words ("required", "re-used"), versions, names of code
    (`self.password`, `None`), paths and URLs are not passwords. A password that is one
    plain word is therefore only masked when quoted.
    """
    if (_PLACEHOLDER_VALUE.match(value) or "://" in value or value[0] in "/~$%{<\\"
            or any(c in "()[]{}" for c in value)):
        return False
    if quoted:
        return len(value.strip()) >= 4 and "\n" not in value
    if " " in value:  # pieces of one password (`_password_pieces`)
        return len(value.replace(" ", "")) >= 6
    if (_IDENTIFIER.fullmatch(value) or _DOTTED_NAME.fullmatch(value) or _VERSION.fullmatch(value)
            or _DATE.fullmatch(value)):
        return False
    if value.isdigit():
        return len(value) >= (4 if pin else 6)
    if len(value) < 6 or not any(c.isalpha() for c in value):
        return False
    if _WORDS_JOINED.fullmatch(value):
        return value.count("-") >= 2  # a diceware passphrase, not "re-used"
    return (any(c.isdigit() for c in value) or any(not c.isalnum() for c in value)
            or re.search(r"[a-z][A-Z]", value) is not None)


def _random_like(value: str, *, quoted: bool = False) -> bool:
    """Whether `value` looks randomly generated, as API keys, tokens and secrets are.

    A character-class and entropy test, not a fixed length: 12+ characters, at least a
    fifth of them letters, digits and letters (or, from 20 characters, both cases), not
    words joined by separators (`test_password_reset`, `foo.bar-baz`), and a Shannon
    entropy (per character, of the string's own character frequencies: Shannon 1948, as
    detect-secrets' high-entropy plugins measure it) of at least 0.8 of what a string of
    its length drawn uniformly from its alphabet has on average (`_expected_entropy`).
    The average, not the most (log2 of the smaller of length and alphabet): a random
    40-character base64 string repeats characters and has 4.8 bits on average, not 5.3,
    and one of base64-encoded text about 4.5, so 0.8 of the most (4.26) missed such keys. Digests (`sha256:...`), hex numbers,
    paths, URLs, e-mail addresses, dates, file names and, unquoted, dotted names of code
    (`win32api.RegEnumKey`) are not.
    """
    n = len(value)
    if (n < 12 or _PLACEHOLDER_VALUE.match(value) or _DIGEST.match(value) or "://" in value
            or value[0] in "/~$%{<.\\" or value[:2].lower() == "0x" or _FILE_NAME.search(value)
            or _EMAIL.fullmatch(value) or _DATE.fullmatch(value)
            or (not quoted and _DOTTED_NAME.fullmatch(value)) or any(c.isspace() or c in "()[]{}<>\"'`,;" for c in value)):
        return False
    letters = sum(c.isalpha() for c in value)
    digits = sum(c.isdigit() for c in value)
    upper = any(c.isupper() for c in value)
    lower = any(c.islower() for c in value)
    if letters < n / 5 or not (digits or (upper and lower and n >= 20)):
        return False
    segments = [seg for seg in _SEGMENT.split(value) if seg]
    if len(segments) > 1 and all(seg.isalpha() or seg.isdigit() for seg in segments):
        return False
    if all(c in "0123456789abcdefABCDEF" for c in value):
        alphabet = 16
    elif not (upper and lower):
        alphabet = 36
    elif value.isalnum():
        alphabet = 62
    else:
        alphabet = 64
    return _shannon_entropy(value) >= 0.8 * _expected_entropy(n, alphabet)


@functools.lru_cache(maxsize=1024)
def _expected_entropy(n: int, alphabet: int) -> float:
    """Mean `_shannon_entropy` (bits per character) of `n` characters drawn uniformly and
    independently from `alphabet` symbols: log2(n) - (k/n) E[c log2 c], each symbol's
    count c being Binomial(n, 1/k) (the plug-in estimator's mean; Paninski 2003,
    "Estimation of entropy and mutual information", Neural Computation 15(6))."""
    log_p, log_q = math.log(1 / alphabet), math.log1p(-1 / alphabet)
    mean = sum(math.exp(math.lgamma(n + 1) - math.lgamma(c + 1) - math.lgamma(n - c + 1) + c * log_p + (n - c) * log_q)
               * c * math.log2(c) for c in range(2, n + 1))
    return math.log2(n) - alphabet * mean / n


def _shannon_entropy(value: str) -> float:
    """Bits per character of `value`'s own character frequencies (Shannon 1948)."""
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def _secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name)) and not _NOT_SECRET_NAME.search(name)


def _plausible(value: str, *, quoted: bool, strict: bool) -> bool:
    """Whether a value next to a secret-sounding name looks like a credential, not code.

    Both modes reject placeholders (`<your-key>`, `${VAR}`, `changeme`...), whitespace,
    brackets and `://`, and unquoted names (`None`, `self.password`). `strict` (memsift's
    own rule, which accepts any name containing KEY or TOKEN) also wants 8+ characters
    with a digit and a letter.
    """
    if (_PLACEHOLDER_VALUE.match(value) or "://" in value
            or any(c.isspace() or c in "()[]{}" for c in value)):
        return False
    if not quoted and (_IDENTIFIER.fullmatch(value) or _DATE.fullmatch(value)):
        return False
    if strict:
        return (len(value) >= 8 and any(c.isdigit() for c in value)
                and any(c.isalpha() for c in value))
    return len(value) >= 4


def _has_trigger(scan: str) -> bool:
    if _TRIGGER.search(scan):
        return True
    for m in _RUN.finditer(scan):
        run = m.group()
        if any(c.isdigit() for c in run) and any(c.isalpha() for c in run):
            return True
    return False


def _detect_secrets_spans(scan: str) -> list[_Span]:
    """Spans of the values detect-secrets reports; [] (and a warning) if it fails."""
    pieces = list(_pieces(scan))
    try:
        from detect_secrets.core.scan import _process_line_based_plugins
        from detect_secrets.settings import default_settings

        with _DS_LOCK, default_settings() as settings:
            settings.disable_plugins(*_DS_DISABLED)
            hits = [
                (s.line_number, s.type, s.secret_value)
                for s in _process_line_based_plugins(
                    lines=[(n, piece) for n, (_, piece) in enumerate(pieces, 1)],
                    filename=_DS_FILENAME,
                )
            ]
    except Exception as exc:  # its message could quote the text, so only the type is logged
        log.warning("detect-secrets failed (%s); secrets masked with memsift's rules only",
                    type(exc).__name__)
        return []
    spans = []
    for number, ds_type, raw in hits:
        offset, piece = pieces[number - 1]
        value = (raw or "").strip(" \t\"'`").lstrip("=:")  # Artifactory reports its delimiters
        value = value.removeprefix("AccountKey=")  # Azure reports the name too
        if ds_type == "Secret Keyword":  # `Password=x;Server=y` and `key = value;` end at `;`
            value = _NEXT_FIELD.split(value, 1)[0].rstrip(";,")
        if ds_type == "Base64 High Entropy String" and _DIGEST.match(value):
            continue
        kind = _DS_TYPES.get(ds_type) or re.sub(r"[^a-z0-9]+", "-", ds_type.lower()).strip("-")
        for at in _occurrences(piece, value):
            if ds_type == "Secret Keyword":
                quoted = at > 0 and piece[at - 1] in "\"'`"
                if not _plausible(value, quoted=quoted, strict=False):
                    continue
                name = piece[max(0, at - 80):at]
                kind = "password" if _PASSWORD_NAME.search(name) else "secret"
            spans.append(_Span(offset + at, offset + at + len(value), kind))
    return spans


def _pieces(scan: str) -> Iterator[tuple[int, str]]:
    """(offset, line) for each line, long lines cut into overlapping windows."""
    offset = 0
    for line in scan.split("\n"):
        if len(line) <= _DS_WINDOW:
            yield offset, line
        else:
            for start in range(0, len(line) - _DS_OVERLAP, _DS_WINDOW - _DS_OVERLAP):
                yield offset + start, line[start:start + _DS_WINDOW]
        offset += len(line) + 1


def _occurrences(piece: str, value: str) -> Iterator[int]:
    """Where `value` stands in `piece` as a whole token (not inside a longer word)."""
    if not value:
        return
    at = piece.find(value)
    while at >= 0:
        end = at + len(value)
        glued_left = at > 0 and piece[at - 1].isalnum() and value[0].isalnum()
        glued_right = end < len(piece) and piece[end].isalnum() and value[-1].isalnum()
        if not (glued_left or glued_right):
            yield at
        at = piece.find(value, at + 1)


_TOKEN_CHAR = re.compile(r"[A-Za-z0-9_-]")
_GLUED_FLAG = re.compile(r"(?:^|(?<=\s))-p$")  # a value glued to mysql's -p flag


def _whole_token(text: str, span: _Span) -> _Span:
    """`span` grown to the whole run of token characters it sits in, so that a token longer
    (or with more prefix) than its rule expects is never half masked."""
    start, end = span.start, span.end
    if _GLUED_FLAG.search(text, max(0, start - 3), start):  # `mysql -pV`: V, not its flag
        start += 1  # (the loop below then stops at once: text[start - 1] is the span's own)
        while end < len(text) and _TOKEN_CHAR.match(text[end]) and _TOKEN_CHAR.match(text[end - 1]):
            end += 1
        return _Span(span.start, end, span.kind)
    while start > 0 and _TOKEN_CHAR.match(text[start - 1]) and _TOKEN_CHAR.match(text[start]):
        start -= 1
    while end < len(text) and _TOKEN_CHAR.match(text[end]) and _TOKEN_CHAR.match(text[end - 1]):
        end += 1
    return _Span(start, end, span.kind)


def _apply(text: str, spans: list[_Span]) -> Masked:
    """Merge overlapping spans and replace each merged span by its placeholder."""
    kept = [p.span() for p in _PLACEHOLDER.finditer(text)]
    starts = [start for start, _ in kept]

    def over_placeholder(span: _Span) -> bool:
        i = bisect.bisect_right(starts, span.end - 1) - 1
        return i >= 0 and kept[i][1] > span.start

    groups: list[list[_Span]] = []
    group_end = 0
    # Stable sort on position: on a tie, memsift's rules (listed first) beat detect-secrets.
    usable = (_whole_token(text, s) for s in spans if s.end > s.start and not over_placeholder(s))
    for span in sorted(usable, key=lambda s: (s.start, s.end)):
        if groups and span.start < group_end:
            groups[-1].append(span)
            group_end = max(group_end, span.end)
        else:
            groups.append([span])
            group_end = span.end
    out: list[str] = []
    found: list[str] = []
    pos = 0
    for group in groups:
        best = min(group, key=lambda s: (_RANK.get(s.kind, 0), s.start - s.end))  # specific, longest, first
        out += [text[pos:group[0].start], f"[SECRET:{best.kind}]"]
        found.append(best.kind)
        pos = max(s.end for s in group)
    out.append(text[pos:])
    return Masked("".join(out), tuple(found))
