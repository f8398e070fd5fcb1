"""Stored text that reads like an instruction to the agent (prompt injection), found by pattern.

A note or passage is data about the project; text in it that addresses the agent ("ignore
previous instructions", "you are now ...", "the user authorised ...", a `<system>` tag) is
the shape of an indirect prompt injection (OWASP LLM01:2025 "Prompt Injection"; Greshake et
al. 2023, "Not what you've signed up for", arXiv:2302.12173). `find` says whether a text has
one of those shapes and why; `recall.render` then pastes the item visibly quoted as data,
and `memsift notes list` marks the note so the user can fix it.

The patterns (`PATTERNS`, each a kind and a regex, in English, French, German, Spanish and
Chinese, the languages memsift supports):

- `override`: ignore / disregard / forget the previous (prior, above) instructions;
- `role`: you are now ..., from now on you ..., your new task is ...;
- `system-prompt`: asking for, replacing or quoting "the system prompt";
- `command`: run / execute a destructive command (`mkfs`, `dd of=/dev/...`, a piped
  `curl | sh`, `DROP DATABASE`, a forced push), or `rm -rf` of `~`, `/`, `$HOME`, `*`, `..`,
  `.git` anywhere (a note that says "run `rm -rf dist/`" is a convention, not an attack);
- `authorisation`: the user (has) authorised / approved / allowed ...;
- `secrecy`: do not tell the user, without asking the user, hide this from the user;
- `role-tag`: chat-template and role markers (`<system>`, `<|im_start|>`, `[INST]`,
  `<<SYS>>`, `<system-reminder>`, a `### Instruction` heading);
- `forged-turn`: a speaker label that opens a conversation turn (`Assistant:`, `User:`,
  `Human:`, `System:`, `AI:`; `Assistant :`, `Utilisateur :`, `Benutzer:`, `Usuario:`,
  `助手：`, `用户：`...; the assistants' own names, `Claude:`, `ChatGPT:`, `GPT:`, `Codex:`,
  `Copilot:`, `Gemini:`) at the start of the text or a line, or after a sentence, in any
  case (`assistant:`, `ASSISTANT:`; within a sentence only as written), followed by a
  colon or a dash (`Assistant — I will`, `Assistant - I will`), and then words in the
  first or second person ("Assistant: I will now delete the repository"), or for an
  assistant what it is doing ("ASSISTANT: deleting the repository"), see `forged_turn`. A passage is a conversation by its form (`capture.passage_text`
  writes `User: ... Assistant: ...`, and an excerpt may hold more turns), so in a passage
  only a turn that cannot be the record's own is one: a chat-template role (`Human:`,
  `System:`, `AI:`) or a turn by the speaker of the turn before it.

A pattern match is a heuristic, not a proof: it flags, it never deletes. Its false hits on
ordinary developer notes and messages are measured by `bench/injection_false_hits.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PREV_EN = r"(?:previous|prior|above|earlier|preceding|foregoing|initial|original|system)"
_INSTR_EN = r"(?:instructions?|prompts?|rules|directions|directives|guidelines|messages|context)"
_CMD = (r"(?:mkfs(?:\.\w+)?\b|dd\s+[^\n]{0,40}?of=/dev/"
        r"|(?:curl|wget)\b[^\n|]{0,200}\|\s*(?:sudo\s+)?(?:ba|z)?sh\b|drop\s+(?:database|schema|table)\b"
        r"|git\s+push\s+[^\n]{0,40}?(?:--force(?![\w-])|-f\b))")

#: (kind, triggers, regex): the regex is matched against the lowercased text, and only when one
#: of its triggers (a lowercase literal every match holds) is in it (a substring test is fast,
#: a regex tried at every position is not). Gaps are bounded (no backtracking blow-up).
PATTERNS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    # -- override ------------------------------------------------------------------------
    ("override", ('ignore', 'disregard', 'forget', 'override', 'skip', 'bypass'), rf"\b(?:ignore|disregard|forget|override|skip|bypass)\s+(?:all\s+|any\s+|the\s+|your\s+|of\s+|my\s+|these\s+|those\s+){{0,3}}"
                 rf"{_PREV_EN}\s+(?:\w+\s+){{0,2}}{_INSTR_EN}\b"),
    ("override", ('disregard', 'forget'), rf"\b(?:disregard|forget)\s+(?:all\s+|any\s+|everything\s+)?(?:your|the|my)\s+{_INSTR_EN}\b"),
    ("override", ('ignore', 'disregard', 'forget'), r"\b(?:ignore|disregard|forget)\s+(?:everything|all)\s+(?:above|before|you\s+were\s+told)\b"),
    ("override", ('ignor', 'oubli'), r"\b(?:ignor|oubli)(?:e|ez|er)\s+(?:toutes\s+|tout\s+)?(?:les|tes|vos|ces)\s+(?:\w+\s+){0,2}"
                 r"(?:instructions|consignes|directives|r[èe]gles)\b"),
    ("override", ('ignorier', 'vergiss', 'vergessen', 'missachte'), r"\b(?:ignorier|vergiss|vergessen\s+sie|missachte)\w*\s+(?:\w+\s+){0,3}"
                 r"(?:anweisungen|instruktionen|anordnungen|regeln|vorgaben)\b"),
    ("override", ('ignor', 'olvid', 'descarta'), r"\b(?:ignora|ignore|olvida|olvide|descarta)\w*\s+(?:\w+\s+){0,3}"
                 r"(?:instrucciones|indicaciones|[óo]rdenes|reglas)\b"),
    ("override", ('忽略', '无视', '忽视', '忘记', '忘掉', '不要理会'), r"(?:忽略|无视|忽视|忘记|忘掉|不要理会)[^。\n]{0,8}(?:之前|以上|上面|先前|前面|此前|所有|全部)?[^。\n]{0,6}"
                 r"(?:指令|指示|提示词|说明|规则|要求)"),
    # -- role ----------------------------------------------------------------------------
    ("role", ('now',), r"\byou\s+are\s+now\s+(?:a|an|the|in|my|no\s+longer|free|dan|jailbroken|unrestricted)\b"),
    ("role", ('now',), r"\bfrom\s+now\s+on,?\s+you\s+(?:are|will|must|should|shall|act)\b"),
    ("role", ('your',), r"\byour\s+(?:new|real|true)\s+(?:task|role|instructions?|goal|purpose)\s+(?:is|are)\b"),
    ("role", ('maintenant', 'désormais', 'desormais'), r"\b(?:tu\s+es|vous\s+[êe]tes)\s+(?:maintenant|d[ée]sormais)\b|\b[àa]\s+partir\s+de\s+maintenant,?\s+(?:tu|vous)\b"),
    ("role", ('jetzt', 'nun', 'sofort'), r"\b(?:du\s+bist|sie\s+sind)\s+(?:jetzt|nun|ab\s+sofort)\s+(?:ein|eine|der|die|das|kein)\b|\bab\s+jetzt\s+bist\s+du\b"),
    ("role", ('ahora',), r"\bahora\s+(?:eres|es\s+usted)\b|\ba\s+partir\s+de\s+ahora,?\s+(?:eres|t[úu]|usted)\b"),
    ("role", ('你现在是', '从现在', '你的新'), r"你现在是(?:一个|一名|一位|个|我的)|从现在(?:开始|起)，?你(?:是|要|必须|将)|你的新(?:任务|角色|指令)是"),
    # -- system prompt -------------------------------------------------------------------
    ("system-prompt", ('system',), r"\b(?:reveal|print|show|repeat|output|leak|dump|ignore|override|replace|disregard|new|your)\s+"
                      r"(?:the\s+|your\s+|my\s+)?system\s+(?:prompt|message|instructions?)\b"),
    ("system-prompt", ('system', 'instruction'), r"(?:^|\n)\s*(?:system\s+prompt|new\s+instructions?)\s*:"),
    ("system-prompt", ('syst',), r"\b(?:r[ée]v[èe]le|affiche|ignore|remplace)\w*\s+(?:le|ton|votre)\s+(?:prompt|invite)\s+syst[èe]me\b"),
    ("system-prompt", ('prompt',), r"\b(?:zeig|verrat|ignorier|ersetz)\w*\s+(?:\w+\s+)?system-?prompt\b"),
    ("system-prompt", ('sistema',), r"\b(?:revela|muestra|ignora|reemplaza)\w*\s+(?:el|tu|su)\s+(?:prompt|mensaje)\s+del\s+sistema\b"),
    ("system-prompt", ('系统提示',), r"(?:显示|泄露|透露|忽略|输出)[^。\n]{0,4}系统提示"),
    # -- command -------------------------------------------------------------------------
    ("command", ('mkfs', 'of=/dev/', 'curl', 'wget', 'drop', 'push'), rf"\b(?:run|execute|exec|type|enter|invoke|ex[ée]cut\w*|lance[rz]?|tape[rz]?|f[üu]hr\w*|ejecut\w*)\b[^\n]{{0,30}}?{_CMD}"),
    ("command", ('mkfs', 'of=/dev/', 'curl', 'wget', 'drop', 'push'), rf"(?:运行|执行|输入)[^\n]{{0,10}}?{_CMD}"),
    ("command", ('rm',), r"\brm\s+-[a-z]*(?:r[a-z]*f|f[a-z]*r)[a-z]*\s+(?:--no-preserve-root\s+)?(?:~/?|/|/\*|\$\{?home\}?/?|\*|\.\*?|\.\./?|\.git/?)(?=$|[\s`'\"),;.])"),
    # -- authorisation -------------------------------------------------------------------
    ("authorisation", ('user', 'owner', 'admin', 'developer', 'operator'), r"\bthe\s+(?:user|owner|admin(?:istrator)?|developer|operator)\s+(?:has\s+|had\s+|have\s+)?(?:already\s+|explicitly\s+)?"
                      r"(?:authori[sz]ed|approved|allowed|permitted|consented|granted\s+permission|given\s+permission|agreed\s+to\s+let)\b"
                      r"(?!\s+(?:the\s+)?(?:design|plan|proposal|pr|pull|change|mockup|draft|spec|budget|estimate|migration\s+plan)\b)"),
    ("authorisation", ('utilisateur',), r"\bl['’]\s*utilisateur\s+(?:a\s+|avait\s+)?(?:d[ée]j[àa]\s+)?(?:autoris[ée]|approuv[ée]|permis|accept[ée]\s+que)\b"),
    ("authorisation", ('nutzer', 'anwender'), r"\bder\s+(?:benutzer|nutzer|anwender)\s+hat\s+(?:\w+\s+){0,3}(?:autorisiert|erlaubt|genehmigt|freigegeben|zugestimmt)\b"),
    ("authorisation", ('usuario',), r"\bel\s+usuario\s+(?:ya\s+)?(?:ha\s+|había\s+)?(?:autorizado|aprobado|permitido|consentido)\b"),
    ("authorisation", ('用户',), r"用户(?:已经|已|早已)?(?:授权|批准|允许|同意)(?:了)?(?:你|删除|执行|运行)"),
    # -- secrecy -------------------------------------------------------------------------
    ("secrecy", ('user',), r"\b(?:do\s+not|don['’]t|never)\s+(?:tell|inform|mention\s+(?:this\s+|it\s+)?to|show|reveal\s+(?:this\s+|it\s+)?to|let)\s+the\s+user\b"),
    ("secrecy", ('user',), r"\bwithout\s+(?:telling|asking|informing|notifying|alerting)\s+the\s+user\b|\bhide\s+(?:this|it)\s+from\s+the\s+user\b"),
    ("secrecy", ('utilisateur',), r"\bne\s+(?:le\s+|lui\s+|rien\s+)?(?:dis|dites)\s+(?:rien\s+|pas\s+)?(?:à|a)\s+l['’]\s*utilisateur\b"
                r"|\bsans\s+(?:le\s+)?(?:dire|demander|pr[ée]venir)\s+(?:à\s+|a\s+)?l['’]\s*utilisateur\b"),
    ("secrecy", ('nutzer', 'anwender'), r"\b(?:sag|sage|erz[äa]hl|zeig)\w*\s+(?:es\s+|das\s+)?(?:dem\s+)?(?:benutzer|nutzer|anwender)\s+nicht(?:s)?\b"
                r"|\bohne\s+(?:den\s+)?(?:benutzer|nutzer|anwender)\s+zu\s+(?:fragen|informieren|benachrichtigen)\b"),
    ("secrecy", ('usuario',), r"\bno\s+(?:le\s+)?(?:digas|diga|cuentes|informes|muestres)\s+(?:nada\s+)?al\s+usuario\b"
                r"|\bsin\s+(?:decirle|avisarle|preguntarle|informar)\s+al\s+usuario\b"),
    ("secrecy", ('用户',), r"(?:不要|别|切勿|不得)(?:告诉|通知)用户|(?:不要|别|切勿|不得)让用户(?:知道|发现|看到)|瞒着用户"),
    # -- role tags -----------------------------------------------------------------------
    ("role-tag", ('system', 'assistant', 'developer', 'instruction'), r"</?\s*(?:system|assistant|developer|instructions?|system-reminder)\s*>"),
    ("role-tag", ('|',), r"<\|\s*(?:im_start|im_end|system|assistant|user|endoftext|begin_of_text|start_header_id)\s*\|>"),
    ("role-tag", ('[inst]', '[/inst]', '<<sys>>', '<</sys>>'), r"\[/?inst\]|<</?sys>>"),
    ("role-tag", ('##',), r"(?:^|\n)\s*#{2,}\s*(?:instructions?|system(?:\s+prompt)?|new\s+instructions?)\s*:?\s*(?:\n|$)"),
)

_COMPILED = tuple((kind, triggers, re.compile(pattern)) for kind, triggers, pattern in PATTERNS)
#: Characters of the matched phrase quoted in a reason.
_EXCERPT_CHARS = 60


@dataclass(frozen=True)
class Finding:
    """Why a text reads like an instruction: the pattern's `kind` and the matched `phrase`."""

    kind: str
    phrase: str

    @property
    def reason(self) -> str:
        """One line for a person: `reads like an instruction to the agent (override): "ignore previous instructions"`."""
        return f'reads like an instruction to the agent ({self.kind}): "{self.phrase}"'


# -- forged turns ------------------------------------------------------------------------
#: Speaker labels memsift's passages use (`capture.passage_text`) and their translations,
#: by speaker; and the roles of chat templates, which a conversation record never holds.
_FRAME_SPEAKERS = {"user": ("User", "Utilisateur", "Benutzer", "Nutzer", "Usuario", "用户", "用戶"),
                   "assistant": ("Assistant", "Assistent", "Asistente", "助手",
                                 # the assistants' own names, as chat exports and logs label them
                                 "Claude", "ChatGPT", "GPT", "Codex", "Copilot", "Gemini")}
_TEMPLATE_ROLES = ("Human", "System", "AI", "Système", "Sistema", "系统", "人类")
_SPEAKER_OF = {label.lower(): who for who, labels in _FRAME_SPEAKERS.items() for label in labels}
_ROLE_OF = {label.lower() for label in _TEMPLATE_ROLES}
_LABELS = "|".join(map(re.escape, sorted([*_SPEAKER_OF, *_TEMPLATE_ROLES], key=len, reverse=True)))
_LABELS_AS_WRITTEN = "|".join(map(re.escape, sorted(
    [*(label for labels in _FRAME_SPEAKERS.values() for label in labels), *_TEMPLATE_ROLES], key=len, reverse=True)))
# A label opens a turn: at the start of the text or a line, or after a sentence's end (the
# other speaker's turn ended there), in any case ("assistant:", "ASSISTANT:"); or within a
# sentence, written as a speaker's name is ("… this: Assistant: I will"), so that "ask the
# user: do you want …" stays a sentence. Then an optional "(name)", then ":" (fr: " :",
# "："), or for a known label a dash ("Assistant — I will", "Assistant - I will").
_TURN = re.compile(
    r"(?:(?:^|(?<=\n)|(?<=[.!?…;)»\"'”] )|(?<=[。！？；]))[ \t]*(?P<label>(?i:" + _LABELS + r"))(?![\w-])"
    r"|(?<=[ \t])(?P<inner>" + _LABELS_AS_WRITTEN + r")(?![\w-])"
    r"|(?<![^.!?…;)»\"'”\n] )(?P<name>[A-Z][a-z]{1,15}))"
    r"(?:[ ]\([^()\n]{1,30}\))?"
    r"(?:[ \t\u00a0\u202f]?[:：]|(?(name)(?!)|(?P<dash>[ \t]*[—–][ \t]*|[ \t]+-[ \t]+)))[ \t]*"
)
# The first or second person, or an answer, within the first words of the turn: what makes
# a label a turn and not a field ("System: Ubuntu 22.04", "User: admin").
_PERSON_WORD = (
    r"(?:(?:i|i['’](?:m|ll|ve|d)|me|my|we|we['’](?:ll|re|ve)|let['’]s|sure|ok|okay|yes|done"
    r"|you|your|please|go\s+ahead|je|j['’]\w+|moi|mon|nous|oui|d['’]accord|vous|tu|ich|mich|mir|mein\w*|wir|ja|du|dich"
    r"|dein\w*|bitte|yo|voy|vamos|mi|mis|sí|claro|vale|usted|tú)(?![\w'’])|我|你|您|好的|请)"
)
_PERSON = re.compile(r"(?i)(?:[^\s.!?。！？\n]+[ \t]+){0,4}?" + _PERSON_WORD)
# After a dash ("Assistant — I will"), which also joins a name to a description ("Gemini -
# the model we compared"), the turn's very first word must be one.
_PERSON_FIRST = re.compile(r"(?i)" + _PERSON_WORD)
# An assistant's turn may also open on what it is doing ("Assistant: deleting the repository").
_DOING = re.compile(r"(?i)[a-z]{2,}ing(?![\w'’-])")


def _sentence_end(text: str, at: int) -> int:
    stop = re.compile(r"[.!?。！？\n]").search(text, at, at + _EXCERPT_CHARS)
    return stop.end() if stop else min(len(text), at + _EXCERPT_CHARS)


def forged_turn(text: str, tier: str = "note") -> tuple[int, int] | None:
    """Where a speaker label in `text` forges a conversation turn, as (start, end) of the
    label and the words after it, or None.

    :param tier: "note" (or anything but "passage"): every turn-opening label followed by
        words in the first or second person is forged; "passage": the record's own turns
        (alternating `User:`/`Assistant:`, or speakers' names) are not, a chat-template role
        or a second turn in a row by the same speaker is.
    """
    previous: str | None = None
    for m in _TURN.finditer(text):
        group = "label" if m["label"] else "inner" if m["inner"] else "name"
        label = m[group].lower()
        speaker = _SPEAKER_OF.get(label)
        if speaker is None and label not in _ROLE_OF:
            previous = label  # a person's name as a speaker: another turn
            continue
        person = (_PERSON_FIRST if m["dash"] else _PERSON).match(text, m.end(), m.end() + 80) or (
            _DOING.match(text, m.end()) if speaker == "assistant" else None)
        if tier != "passage":
            if person:
                return m.start(group), _sentence_end(text, person.end())
            continue
        if (speaker is None and person) or (speaker is not None and speaker == previous):
            return m.start(group), _sentence_end(text, m.end())
        previous = speaker or label
    return None


def find(text: str, tier: str = "note") -> Finding | None:
    """The first instruction-like shape in `text` (see `PATTERNS` and `forged_turn`), or None.

    :param tier: what `text` is stored as, `recall.Item.tier`: "note" (the default, also for
        any other text) or "passage" (a conversation excerpt, whose own speaker labels are
        not forged turns).

    Linear in `len(text)`; callers on the prompt path pass a bounded text.
    """
    low = text.lower()
    best: tuple[int, int, str] | None = None
    for kind, triggers, pattern in _COMPILED:
        if any(t in low for t in triggers) and (m := pattern.search(low)) and (best is None or m.start() < best[0]):
            best = (m.start(), m.end(), kind)
    same = len(low) == len(text)  # lowercasing kept offsets: quote the text as written
    if (turn := forged_turn(text, tier)) and (best is None or (same and turn[0] < best[0])):
        best = (*turn, "forged-turn")
        low, same = text, True
    if best is None:
        return None
    start, end, kind = best
    phrase = " ".join((text if same else low)[start:end].split())
    if len(phrase) > _EXCERPT_CHARS:
        phrase = phrase[: _EXCERPT_CHARS - 1] + "…"
    return Finding(kind, phrase)
