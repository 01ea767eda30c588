"""The committed gRPC stubs match protos/: regenerate into a temp folder and compare."""

from pathlib import Path

from voicebot.protogen import ROOT, generate


def test_committed_stubs_are_up_to_date(tmp_path):
    generated = generate(tmp_path)
    assert generated, "protoc produced nothing"
    committed = ROOT / "voicebot" / "v1"
    stale = [f.name for f in generated if (committed / f.name).read_text() != f.read_text()]
    missing = [f.name for f in generated if not (committed / f.name).exists()]
    assert not missing and not stale, f"run `make protos`: stale {stale}, missing {missing}"


def test_every_proto_request_carries_session_and_turn():
    from voicebot.v1 import brain_pb2, stt_pb2, tts_pb2

    for message in (brain_pb2.RespondRequest, stt_pb2.RecognitionConfig, tts_pb2.SynthesisConfig):
        fields = set(message.DESCRIPTOR.fields_by_name)
        assert {"session_id", "turn_id"} <= fields, message.DESCRIPTOR.full_name
    assert Path(ROOT / "protos" / "voicebot" / "v1" / "stt.proto").exists()
