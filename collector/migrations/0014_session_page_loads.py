from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("collector", "0013_session_left_at"),
    ]

    operations = [
        migrations.AddField(
            model_name="session",
            name="page_loads",
            field=models.PositiveIntegerField(
                default=0,
                help_text=(
                    "How many times the player page was served. The pagehide beacon names the page it came from: "
                    "a beacon of an earlier page (a reload's, arriving after the new page was served) is ignored."
                ),
            ),
        ),
    ]
